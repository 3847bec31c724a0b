"""Benchmark: IMPALA's training fps against TorchRL's best collector layout collecting alone,
and against the env-only limit.

    python experiments/bench_impala.py [--frames 1500000] [--collector-frames 200000]

All in one invocation on this machine, with the same 2x64 policy MLP on CartPole-v1:
1. TorchRL's collectors in every layout of ``experiments/baselines.py`` (collecting only), and
   the env-only limit (2 processes stepping ``SyncVectorEnv(256)`` with random actions);
2. ``torchrun --nproc-per-node=3 launch/train.py impala`` training for ``--frames`` frames
   (learner + 2 actors), fps from its ``summary.json``.
It prints impala's fps against the best layout found and as a fraction of the limit.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # distrl from this checkout, installed or not

from experiments.baselines import report  # noqa: E402


def train_summary(recipe: str, frames: int, nproc: int = 3, extra: list[str] | None = None,
                  env: str = "CartPole-v1") -> dict:
    """Run ``recipe`` under torchrun on ``env`` (a gymnasium id or a TorchRL env factory) for
    ``frames`` frames; returns its summary."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               str(ROOT / "launch" / "train.py"), recipe, "--env", env, "--total-frames", str(frames),
               "--logger", "none", "--run-dir", tmp, "--set", "run.eval_episodes=0", *(extra or [])]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, cwd=ROOT, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads((Path(tmp) / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_500_000, help="impala training frames")
    ap.add_argument("--collector-frames", type=int, default=150_000, help="frames the collector gathers")
    ap.add_argument("--variant", action="append", default=[], metavar="FIELD=V,FIELD=V",
                    help="also train impala with these config overrides (repeatable), e.g. "
                         "algo.envs_per_actor=32,algo.unroll_length=32,algo.batch_trajectories=2")
    args = ap.parse_args()
    best, ref, limit = report(args.collector_frames)
    for variant in ["", *args.variant]:
        sets = [w for kv in variant.split(",") if kv for w in ("--set", kv)]
        s = train_summary("impala", args.frames, extra=sets)
        name = f"impala {variant}" if variant else "impala (defaults)"
        print(f"distrl {name}, torchrun 3 procs (training): {s['fps']:10,.0f} frames/s ({s['fps'] / limit:5.1%} of the "
              f"limit; lag mean {s['policy_lag_mean']:.2f}, {s['learner_updates']} updates)", flush=True)
        print(f"ratio {name} / best TorchRL layout ({best}): {s['fps'] / ref:.2f}x", flush=True)
        for role, phases in s.get("time_budget", {}).items():  # where each role's time went
            print(f"    {role:10s} " + "  ".join(f"{k} {v:.2f}" for k, v in phases.items()), flush=True)


if __name__ == "__main__":
    main()
