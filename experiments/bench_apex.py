"""Benchmark: the Ape-X learner's sampling rate with 1 and 2 replay shards.

    python experiments/bench_apex.py [--seconds 40] [--actors 2]

Runs ``torchrun launch/train.py apex --env CartPole-v1`` twice in one invocation, with
``algo.shards=1`` (learner + 1 shard + actors) and ``algo.shards=2`` (one more process), the rate
limiter off (``algo.samples_per_insert=0``) so the learner samples as fast as it can, and prints
the learner's samples/s (items received from the shards per second of training), its updates/s,
the env frames/s and where the learner's time went (waiting for samples against updating).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(shards: int, actors: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={1 + shards + actors}",
               str(ROOT / "launch" / "train.py"), "apex", "--env", "CartPole-v1", "--max-time-s", str(seconds),
               "--run-dir", str(run_dir), "--logger", "none", "--set", f"algo.shards={shards}",
               "--set", "algo.samples_per_insert=0"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 300)
        if proc.returncode != 0:
            raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
        return json.loads((run_dir / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--actors", type=int, default=2)
    args = ap.parse_args()
    print(f"apex on CartPole-v1, {args.actors} actors, {args.seconds:.0f} s each, rate limiter off")
    for shards in (1, 2):
        s = run(shards, args.actors, args.seconds)
        wall = s["wall_s"]
        print(f"shards={shards} ({1 + shards + args.actors} processes): learner {s['replay_sampled'] / wall:>9,.0f} samples/s, "
              f"{s['learner_updates'] / wall:6.1f} updates/s, {s['fps']:>8,.0f} env frames/s; learner time "
              f"{s['learner_wait_sample_s']:.1f} s waiting for samples, {s['learner_update_s']:.1f} s updating; "
              f"eval {s['eval_return_mean']}")


if __name__ == "__main__":
    main()
