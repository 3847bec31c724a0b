"""Benchmark: A3C against A2C on CartPole-v1, the same launch with ``algo.sync`` off and on.

    python experiments/bench_a3c.py [--seeds 0 1 2 3 4] [--time-s 120] [--nproc 3] [--target 475]
                                    [--modes a3c a2c] [--set algo.lr=3e-4 ...]

For each mode and seed, one ``torchrun --nproc-per-node=3 launch/train.py a3c`` run of
``--time-s`` seconds *without* early stop (learning is judged over seeds, and a run stopped at
its first crossing hides a later collapse). From each run's ``metrics.jsonl`` and
``summary.json``: the training seconds at which the mean of the last 100 training returns first
reached ``--target``, the lowest such mean after that (does it hold?), the final greedy
evaluation (10 episodes), staleness (mean, max), updates per second and frames per second.
Prints one row per run and the medians per mode, with the spread (min-max).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(sync: bool, seed: int, time_s: float, nproc: int, target: float, overrides: list[str] = ()) -> dict:
    """One run's figures (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               str(ROOT / "launch" / "train.py"), "a3c", "--experiment", "a2c" if sync else "default",
               "--env", "CartPole-v1", "--seed", str(seed), "--max-time-s", str(time_s), "--logger", "none",
               "--run-dir", tmp, "--set", "run.log_interval_s=2", *(x for o in overrides for x in ("--set", o))]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, cwd=ROOT, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        s = json.loads((Path(tmp) / "summary.json").read_text())
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    t0 = rows[-1]["time"] - s["wall_s"]  # the last row is written at the end of training
    curve = [(r["time"] - t0, r["actor/return_mean_100"]) for r in rows if "actor/return_mean_100" in r]
    reached = [i for i, (_, ret) in enumerate(curve) if ret >= target]
    first = reached[0] if reached else None
    return {"mode": "a2c" if sync else "a3c", "seed": seed,
            "t_target_s": round(curve[first][0], 1) if first is not None else None,
            "low_after": round(min(ret for _, ret in curve[first:]), 1) if first is not None else None,
            "eval": s["eval_return_mean"], "staleness_mean": s["staleness_mean"], "staleness_max": s["staleness_max"],
            "updates_per_s": s["updates_per_s"], "fps": s["fps"], "dropped": s["dropped_stale_gradients"]}


def spread(values: list) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "n/a"
    fmt = lambda v: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"  # noqa: E731
    return f"{fmt(statistics.median(vals))} ({fmt(min(vals))}-{fmt(max(vals))})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--time-s", type=float, default=120.0, help="training seconds of every run (no early stop)")
    ap.add_argument("--nproc", type=int, default=3, help="torchrun processes: 1 server + workers")
    ap.add_argument("--target", type=float, default=475.0, help="training-mean return that counts as reached")
    ap.add_argument("--modes", nargs="+", default=["a3c", "a2c"], choices=["a3c", "a2c"])
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run (repeatable), as launch/train.py's --set")
    args = ap.parse_args()
    results = []
    for mode in args.modes:
        for seed in args.seeds:
            r = one_run(mode == "a2c", seed, args.time_s, args.nproc, args.target, args.overrides)
            results.append(r)
            print(json.dumps(r), flush=True)
    print(f"\n{'':5s}{'reached':>8s}{'held':>6s}{'t_target s':>22s}{'final eval':>22s}{'staleness mean':>22s}"
          f"{'max':>5s}{'updates/s':>22s}{'fps':>24s}")
    for mode in args.modes:
        rs = [r for r in results if r["mode"] == mode]
        reached = sum(r["t_target_s"] is not None for r in rs)
        held = sum(r["t_target_s"] is not None and r["eval"] >= args.target for r in rs)
        print(f"{mode:5s}{reached:>6d}/{len(rs)}{held:>4d}/{len(rs)}{spread([r['t_target_s'] for r in rs]):>22s}"
              f"{spread([r['eval'] for r in rs]):>22s}{spread([r['staleness_mean'] for r in rs]):>22s}"
              f"{max(r['staleness_max'] for r in rs):>5d}{spread([r['updates_per_s'] for r in rs]):>22s}"
              f"{spread([round(r['fps']) for r in rs]):>24s}")
    print(f"(held: reached {args.target:g} and the final greedy evaluation, after {args.time_s:g} s, is still >= it)")


if __name__ == "__main__":
    main()
