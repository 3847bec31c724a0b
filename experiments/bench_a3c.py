"""Benchmark: A3C against A2C on CartPole-v1, the same launch with ``algo.sync`` off and on.

    python -m experiments.bench_a3c [--seeds 0-4] [--max-time-s 120] [--nproc 3] [--out runs/bench_a3c]
                                    [--modes a3c a2c] [--collector-frames 150000] [--set algo.lr=3e-4 ...]

Each mode is a seed sweep (:mod:`distrl.studies.sweep`, what ``launch/sweep.py`` runs): one ``torchrun
--nproc-per-node=3`` run per seed, ``--max-time-s`` of training, no early stop, the target 475 as a
measurement only. Per mode it prints the sweep's figures (reached, held, time to target, final
greedy evaluation) and what A3C adds from each seed's ``summary.json``: staleness (mean, max),
gradients dropped, updates per second (over the whole run), trained frames/s. Seeds run one at
a time (they share the machine's cores).

Speed is timed as ``experiments/kit/measure.py`` says: TorchRL's layouts of ``experiments/kit/yardstick.py``
and the env-only limit before the sweeps, TorchRL's best layout again after them (the higher
figure is the one to beat); each seed's trained frames/s is ``fps_running`` (wall clock, from the
server's first applied gradient to its last, the frames of dropped gradients left out), and each
mode's median over seeds is held against TorchRL's best layout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from distrl.studies.sweep import aggregate, parse_seeds, run_sweep, write_outputs
from experiments.kit.runs import ROOT
from experiments.kit.yardstick import Yardstick

EXPERIMENT = {"a3c": "default", "a2c": "a2c"}


def spread(values: list) -> str:
    """``median (min-max)``."""
    vals = [v for v in values if v is not None and v != float("inf")]
    if not vals:
        return "n/a"
    fmt = lambda v: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"  # noqa: E731
    return f"{fmt(statistics.median(vals))} ({fmt(min(vals))}-{fmt(max(vals))})"


def staleness_figures(out: Path, seeds: list[int]) -> list[dict]:
    """A3C's own figures of each seed's run (``summary.json``)."""
    rows = []
    for seed in seeds:
        try:
            s = json.loads((out / f"seed_{seed}" / "summary.json").read_text())
        except OSError:
            continue
        rows.append(
            {
                k: s[k]
                for k in (
                    "staleness_mean",
                    "staleness_max",
                    "dropped_stale_gradients",
                    "updates_per_s",
                    "fps_running",
                    "frames_dropped",
                )
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=parse_seeds, default=[0, 1, 2, 3, 4], help="e.g. 0-4 or 0,3,5")
    ap.add_argument("--max-time-s", type=float, default=120.0, help="training seconds of every run (no early stop)")
    ap.add_argument("--nproc", type=int, default=3, help="torchrun processes: 1 server + workers")
    ap.add_argument("--target", type=float, default=475.0, help="training-mean return measured as the target")
    ap.add_argument("--modes", nargs="+", default=["a3c", "a2c"], choices=list(EXPERIMENT))
    ap.add_argument(
        "--collector-frames",
        type=int,
        default=150_000,
        help="frames each TorchRL layout gathers after its first batch (0: skip TorchRL)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_a3c", help="sweep outputs, one folder per mode")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every run (repeatable), as launch/train.py's --set",
    )
    args = ap.parse_args()
    yard = Yardstick(args.collector_frames)
    yard.before()
    lines, speeds = [], {}
    for mode in args.modes:
        out = args.out / mode
        train_args = [
            "--experiment",
            EXPERIMENT[mode],
            "--env",
            "CartPole-v1",
            "--max-time-s",
            str(args.max_time_s),
            "--logger",
            "none",
            "--set",
            "run.log_interval_s=2",
            *(x for o in args.overrides for x in ("--set", o)),
        ]
        results = run_sweep("a3c", args.seeds, out, args.nproc, 1, args.target, args.max_time_s, train_args)
        write_outputs(out, results, f"a3c ({mode}), CartPole-v1, {args.nproc} processes", " ".join(sys.argv))
        agg, extra = aggregate(results), staleness_figures(out, args.seeds)
        speeds[mode] = [e["fps_running"] for e in extra if e["fps_running"] is not None]
        lines.append(
            f"| {mode} | {agg['reached']}/{agg['seeds']} | {agg['held']}/{agg['seeds']} "
            f"| {spread([r['time_to_target_s'] for r in results])} | {spread([r['final_eval'] for r in results])} "
            f"| {spread([r['min_return_after_target'] for r in results])} "
            f"| {spread([e['staleness_mean'] for e in extra])} | "
            f"{max((e['staleness_max'] for e in extra), default='n/a')} "
            f"| {sum(e['dropped_stale_gradients'] for e in extra)} | {spread([e['updates_per_s'] for e in extra])} "
            f"| {spread(speeds[mode])} | {sum(e['frames_dropped'] for e in extra):,} |"
        )
    yard.after()
    print(
        "\n| mode | reached | held | time to target s | final greedy eval | lowest mean after | staleness mean "
        "| staleness max | dropped | updates/s | trained frames/s | frames dropped |\n" + "|---" * 12 + "|"
    )
    print("\n".join(lines))
    print(
        f"(medians with min-max over seeds; held as distrl.studies.sweep counts it; per-seed tables in "
        f"{args.out}/*/sweep.md;"
        f" trained frames/s: wall clock from the first applied gradient, dropped ones left out)"
    )
    for mode, fps in speeds.items():
        if fps:
            med = statistics.median(fps)
            print(f"  {mode}: median {med:,.0f} trained frames/s = {yard.ratio(med)}")


if __name__ == "__main__":
    main()
