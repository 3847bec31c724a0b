"""``distrl sweep``: one recipe, N seeds, a fixed budget each and no early stop, judged as a
distribution (design rule 8).

    distrl sweep impala --seeds 0-9 --nproc 3 --max-time-s 90 --env CartPole-v1
    distrl sweep vecenv --seeds 0-9 --parallel 2 --max-time-s 30

:func:`run_sweep` launches every seed (``--nproc`` processes each, ``parallel`` at a time),
:func:`seed_result` reads what a finished run measured from its ``summary.json``, and
:func:`aggregate` turns the seeds into the figures a paper would quote: the success rate, the median
and interquartile range of the time to target, and the interquartile mean of the final greedy
evaluation with a bootstrap confidence interval. ``sweep.md``, ``sweep.json`` and ``curves.png``
are written beside the runs; ``distrl compare`` launches its runs with the same :func:`seed_command`.
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from distrl.studies.child_runs import child_env, stop_tree
from distrl.studies.stats import bootstrap_ci, iqm, median_iqr


def seed_command(
    recipe: str, seed: int, run_dir: Path, nproc: int, target: Optional[float], train_args: Sequence[str]
) -> list[str]:
    """The command line of one seed: ``distrl train`` with the user's options, the seed, its own run
    dir, the target as a measurement only (no early stop); ``--nproc`` processes on this machine."""
    own = ["--seed", str(seed), "--run-dir", str(run_dir), "--set", "run.early_stop=false"]
    if target is not None:
        own += ["--target-return", str(target)]
    if nproc > 1:
        own += ["--nproc", str(nproc)]
    return [sys.executable, "-m", "distrl.train", recipe, *train_args, *own]


def run_sweep(
    recipe: str,
    seeds: Sequence[int],
    out: Path,
    nproc: int,
    parallel: int,
    target: Optional[float],
    budget_s: float,
    train_args: Sequence[str],
) -> list[dict[str, Any]]:
    """Run every seed (``parallel`` at a time), each into ``out/seed_<n>``; returns their results,
    each with its run's ``exit_code``."""
    out.mkdir(parents=True, exist_ok=True)
    codes: dict[int, Optional[int]] = {}
    pending = list(seeds)
    running: list[tuple[int, subprocess.Popen, float, Any]] = []
    while pending or running:
        while pending and len(running) < parallel:
            seed = pending.pop(0)
            log = open(out / f"seed_{seed}.log", "w")
            cmd = seed_command(recipe, seed, out / f"seed_{seed}", nproc, target, train_args)
            running.append(
                (
                    seed,
                    subprocess.Popen(
                        cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True
                    ),
                    time.monotonic(),
                    log,
                )
            )
            print(f"[sweep] seed {seed}: started ({shlex.join(cmd[3:])})", flush=True)
        for item in list(running):
            seed, proc, started, log = item
            # A seed gets its budget plus start-up, final evaluation and shutdown; past that it hangs.
            if proc.poll() is None and time.monotonic() - started > budget_s * 1.5 + 120:
                print(f"[sweep] seed {seed}: stopped after {time.monotonic() - started:.0f}s", flush=True)
                stop_tree(proc)
            if proc.poll() is None:
                continue
            running.remove(item)
            log.close()
            codes[seed] = proc.returncode
            r = seed_result(out / f"seed_{seed}", seed, target)
            print(f"[sweep] seed {seed}: {describe(r)}", flush=True)
        time.sleep(0.5)
    return [{**seed_result(out / f"seed_{s}", s, target), "exit_code": codes.get(s)} for s in seeds]


def seed_result(run_dir: Path, seed: int, target: Optional[float], hold_floor: float = 250.0) -> dict[str, Any]:
    """What one seed measured. ``held``: it reached ``target``, its training mean never fell below
    ``hold_floor`` afterwards, and its final greedy evaluation is at least ``target``."""
    try:
        s = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {"seed": seed, "finished": False, "reached": False, "held": False, "time_to_target_s": math.inf}
    reached = s.get("target_reached")
    low, final = s.get("min_return_after_target"), s.get("eval_return_mean")
    held = bool(reached) and low is not None and low >= hold_floor and final is not None and final >= target
    return {
        "seed": seed,
        "finished": True,
        "reached": bool(reached),
        "held": held,
        "time_to_target_s": reached["wall_s"] if reached else math.inf,
        "frames_to_target": reached["env_frames"] if reached else None,
        "min_return_after_target": low,
        "final_eval": final,
        "best_eval": s.get("best_eval_return_mean"),
        "return_mean_100": s.get("return_mean_100"),
        "fps": s.get("fps"),
        "wall_s": s.get("wall_s"),
        "policy_lag_mean": s.get("policy_lag_mean"),
        "stop_reason": s.get("stop_reason"),
    }


def describe(r: dict[str, Any]) -> str:
    """One seed's result in one line (the progress display's)."""
    if not r["finished"]:
        return "no summary.json (crashed or killed)"
    ttt = f"target at {r['time_to_target_s']:.1f}s" if r["reached"] else "target not reached"
    return (
        f"{ttt}, lowest after {r['min_return_after_target']}, final eval {r['final_eval']}, "
        f"{'held' if r['held'] else 'NOT held'}, {r['fps'] or 0:,.0f} fps"
    )


def aggregate(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Success rates, time to target (median, IQR; ``inf`` for seeds that never reached it) and the
    IQM of the final greedy evaluation with its 95% bootstrap interval."""
    n = len(results)
    times = [r["time_to_target_s"] for r in results]
    finals = [r["final_eval"] for r in results if r.get("final_eval") is not None]
    med, q1, q3 = median_iqr(times)
    lo, hi = bootstrap_ci(finals)
    return {
        "seeds": n,
        "reached": sum(r["reached"] for r in results),
        "held": sum(r["held"] for r in results),
        "time_to_target_median_s": med,
        "time_to_target_iqr_s": [q1, q3],
        "final_eval_iqm": iqm(finals),
        "final_eval_iqm_ci95": [lo, hi],
        "final_eval_min": min(finals) if finals else None,
        "min_return_after_target_min": min(
            (r["min_return_after_target"] for r in results if r.get("min_return_after_target") is not None),
            default=None,
        ),
        "fps_median": median_iqr([r["fps"] for r in results if r.get("fps")])[0] if finals else None,
    }


def _fmt(x: Optional[float], digits: int = 1) -> str:
    if x is None:
        return "-"
    return "never" if x == math.inf else f"{x:,.{digits}f}"


def table(results: Sequence[dict[str, Any]], agg: dict[str, Any], title: str) -> str:
    """The sweep as markdown: one row per seed, then the aggregates."""
    lines = [
        f"## {title}",
        "",
        "| seed | time to target (s) | frames to target | lowest mean after | "
        "final greedy eval | best eval | fps | held |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['seed']} | {_fmt(r['time_to_target_s'])} | {_fmt(r.get('frames_to_target'), 0)} | "
            f"{_fmt(r.get('min_return_after_target'))} | {_fmt(r.get('final_eval'))} | "
            f"{_fmt(r.get('best_eval'))} | {_fmt(r.get('fps'), 0)} | {'yes' if r['held'] else 'no'} |"
        )
    q1, q3 = agg["time_to_target_iqr_s"]
    lo, hi = agg["final_eval_iqm_ci95"]
    lines += [
        "",
        f"- reached the target: {agg['reached']}/{agg['seeds']}; held it: {agg['held']}/{agg['seeds']}",
        f"- time to target: median {_fmt(agg['time_to_target_median_s'])} s, IQR {_fmt(q1)}-{_fmt(q3)} s",
        f"- final greedy eval: IQM {_fmt(agg['final_eval_iqm'])} (95% bootstrap CI {_fmt(lo)}-{_fmt(hi)}), "
        f"lowest {_fmt(agg['final_eval_min'])}",
        f"- lowest training mean after reaching the target, over all seeds: {_fmt(agg['min_return_after_target_min'])}",
        f"- fps: median {_fmt(agg['fps_median'], 0)}",
        "",
    ]
    return "\n".join(lines)


def write_outputs(out: Path, results: Sequence[dict[str, Any]], title: str, command: str) -> dict[str, Any]:
    """``sweep.md``, ``sweep.json`` and ``curves.png`` (every seed's training curves) in ``out``."""
    agg = aggregate(results)
    md = table(results, agg, title) + f"\nCommand: `{command}`\n"
    (out / "sweep.md").write_text(md)
    (out / "sweep.json").write_text(
        json.dumps({"command": command, "aggregate": agg, "seeds": list(results)}, indent=2, default=str)
    )
    runs = [out / f"seed_{r['seed']}" for r in results if (out / f"seed_{r['seed']}" / "metrics.jsonl").is_file()]
    if runs:
        from distrl.logging.plots import plot_runs

        plot_runs(runs, out / "curves.png", x="time", labels=[f"seed {p.name[5:]}" for p in runs])
    return agg


def parse_seeds(text: str) -> list[int]:
    """``"0-9"``, ``"0,3,5"`` or ``"0-2,7"`` as a list of ints; ``ValueError`` in one line otherwise."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()) or (hi and int(hi) < int(lo)):
            raise ValueError(f"--seeds expects ranges like 0-9 or 0,3,5, got {text!r}")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds names a seed twice: {text!r}")
    return seeds


def make_parser():
    from distrl.runtime.args import OneLineParser, positive_int

    p = OneLineParser(
        prog="distrl sweep",
        allow_abbrev=False,
        description=(
            "Run one recipe over several seeds, each with a fixed budget and no early stop, and report the\n"
            "distribution: a markdown table, JSON and every seed's training curves.\n\n"
            "    distrl sweep impala --seeds 0-9 --nproc 3 --max-time-s 90 --env CartPole-v1\n"
            "    distrl sweep vecenv --seeds 0-9 --parallel 2 --max-time-s 30\n\n"
            "Options it does not know go to distrl train unchanged (--env, --set, --experiment...). Each seed\n"
            "trains with --target-return as a measurement only (run.early_stop=false): the time it first\n"
            "reached it, the lowest training mean after, the final greedy evaluation. Results go to --out\n"
            "(sweep.md, sweep.json, curves.png, one run directory and log per seed)."
        ),
    )
    p.add_argument("recipe", metavar="RECIPE", help="recipe to sweep: a registered name or path/to/file.py:NAME")
    p.add_argument("--seeds", default="0-9", help="seeds: 0-9, 0,3,5 or 0-2,7")
    p.add_argument("--nproc", type=positive_int, default=1, help="processes per seed")
    p.add_argument("--parallel", type=positive_int, default=1, help="seeds run at the same time")
    p.add_argument("--max-time-s", type=float, default=90.0, help="training budget of every seed")
    p.add_argument("--target-return", type=float, default=475.0, help="the score whose first crossing is timed")
    p.add_argument(
        "--hold-floor",
        type=float,
        default=250.0,
        help="a seed holds when its training mean never falls below this after the target",
    )
    p.add_argument("--out", help="output folder (default: runs/sweep-<recipe>-<time>)")
    p.add_argument("--report-only", action="store_true", help="re-read the seeds already in --out; run nothing")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    """``distrl sweep`` (and ``launch/sweep.py``); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args, train_args = make_parser().parse_known_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
        if args.max_time_s <= 0:
            raise ValueError(f"--max-time-s must be > 0, got {args.max_time_s:g}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    name = "".join(c if c.isalnum() or c in "_.-" else "_" for c in Path(args.recipe).name)
    out = Path(args.out or f"runs/sweep-{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    train_args = [*train_args, "--max-time-s", str(args.max_time_s)]
    command = "distrl sweep " + shlex.join(argv)
    codes = {}
    if not args.report_only:
        ran = run_sweep(
            args.recipe, seeds, out, args.nproc, args.parallel, args.target_return, args.max_time_s, train_args
        )
        codes = {r["seed"]: r["exit_code"] for r in ran}
    elif not out.is_dir():
        print(f"error: --report-only: no sweep in {out}", file=sys.stderr)
        return 2
    results = [seed_result(out / f"seed_{s}", s, args.target_return, args.hold_floor) for s in seeds]
    title = f"{args.recipe}, {len(seeds)} seeds, {args.nproc} process(es) each, {args.max_time_s:g} s budget"
    write_outputs(out, results, title, command)
    print((out / "sweep.md").read_text())
    print(f"[sweep] wrote {out / 'sweep.md'}, sweep.json, curves.png")
    # a seed that failed (no summary, or a nonzero exit: its log says why) fails the sweep, as in compare
    failed = [r["seed"] for r in results if not r["finished"] or codes.get(r["seed"]) not in (None, 0)]
    if failed:
        print(
            f"[sweep] {len(failed)} of {len(seeds)} seeds failed: {failed} (see seed_N.log in {out})", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
