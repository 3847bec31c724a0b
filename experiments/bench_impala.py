"""Benchmark: IMPALA's training fps against TorchRL's best collector collecting alone.

    python experiments/bench_impala.py [--frames 1500000] [--collector-frames 200000]

Both run on this machine in one invocation, with the same 2x64 policy MLP on CartPole-v1:
1. TorchRL ``MultiSyncCollector``, 2 worker processes x ``SerialEnv`` of 8 ``GymEnv``s,
   collecting only (no learning), frames/s after a warm-up batch;
2. ``torchrun --nproc-per-node=3 launch/train.py impala`` training for ``--frames`` frames
   (learner + 2 actors), fps from its ``summary.json``.
It prints both figures and their ratio (the acceptance bar is 4x).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # distrl from this checkout, installed or not


def collector_fps(frames: int, workers: int = 2, envs_per_worker: int = 8) -> float:
    """Frames/s of TorchRL's MultiSyncCollector with the impala policy network, collecting alone."""
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import MultiSyncCollector
    from torchrl.envs import GymEnv, SerialEnv
    from torchrl.modules import OneHotCategorical, ProbabilisticActor

    from distrl.models import ActorCritic

    def make_env():
        return SerialEnv(envs_per_worker, lambda: GymEnv("CartPole-v1"))

    net = ActorCritic(4, 2).policy
    policy = ProbabilisticActor(TensorDictModule(net, in_keys=["observation"], out_keys=["logits"]),
                                in_keys=["logits"], distribution_class=OneHotCategorical, return_log_prob=True)
    batch = workers * envs_per_worker * 64
    collector = MultiSyncCollector([make_env] * workers, policy, frames_per_batch=batch, total_frames=-1)
    try:
        it = iter(collector)
        next(it)  # warm-up: worker start, first resets
        start, done = time.perf_counter(), 0
        while done < frames:
            done += next(it).numel()
        return done / (time.perf_counter() - start)
    finally:
        collector.shutdown()
        torch.set_num_threads(1)


def train_summary(recipe: str, frames: int, nproc: int = 3, extra: list[str] | None = None) -> dict:
    """Run ``recipe`` under torchrun on CartPole-v1 for ``frames`` frames; returns its summary."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               str(ROOT / "launch" / "train.py"), recipe, "--env", "CartPole-v1", "--total-frames", str(frames),
               "--logger", "none", "--run-dir", tmp, "--set", "run.eval_episodes=0", *(extra or [])]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, cwd=ROOT, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads((Path(tmp) / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_500_000, help="impala training frames")
    ap.add_argument("--collector-frames", type=int, default=150_000, help="frames the collector gathers")
    args = ap.parse_args()
    ref = collector_fps(args.collector_frames)
    print(f"torchrl MultiSyncCollector 2x8 envs (collect only): {ref:10,.0f} frames/s", flush=True)
    s = train_summary("impala", args.frames)
    print(f"distrl impala, torchrun 3 procs (training):       {s['fps']:10,.0f} frames/s "
          f"(lag mean {s['policy_lag_mean']:.2f}, {s['learner_updates']} updates)")
    print(f"ratio impala / collector: {s['fps'] / ref:.1f}x")


if __name__ == "__main__":
    main()
