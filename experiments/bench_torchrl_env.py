"""Benchmark of door 1: the gymnasium-id fast path against the TorchRL ``Collector`` path over a
user's env factory, side by side, CartPole-v1 with the impala actor's 2x64 policy.

    python experiments/bench_torchrl_env.py [--frames 300000] [--collect-frames 60000]
        [--factory distrl.envs.torchrl_factories:cartpole_with_stepcounter ...]

1. Collecting only, one process, ``algo.envs_per_actor`` envs (32) and ``algo.unroll_length``
   steps (32) per unroll, the impala actor's own sampling: ``EnvRunner`` (gymnasium
   ``SyncVectorEnv``) against ``CollectorRunner`` (TorchRL ``Collector``) over each factory.
2. Training: ``torchrun --nproc-per-node=3 launch/train.py impala`` for ``--frames`` frames with
   ``--env CartPole-v1`` and with ``--env FACTORY``; fps from each run's ``summary.json``.

The default factories: one ``GymEnv`` behind a ``StepCounter`` (distrl batches it in a
``SerialEnv``: TorchRL's per-env cost on every frame), and a ``SyncVectorEnv`` inside
``GymWrapper`` behind a ``StepCounter`` (the factory batches itself: TorchRL's fast CPU layout).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # distrl from this checkout, installed or not

from experiments.bench_impala import train_summary  # noqa: E402

FACTORIES = ("distrl.envs.torchrl_factories:cartpole_with_stepcounter",
             "distrl.envs.torchrl_factories:cartpole_vector_with_stepcounter")


def collect_fps(env: str, frames: int, B: int = 32, T: int = 32) -> float:
    """Frames/s of one actor's envs alone (no learner, no transport) under the impala actor's policy."""
    import torch

    from distrl.data import keys
    from distrl.envs.gym import env_info
    from distrl.models import ActorCritic, sample_actions
    from distrl.roles.env_runner import make_env_runner

    torch.set_num_threads(1)
    info = env_info(env)
    model, generator = ActorCritic(info.obs_dim, info.num_actions), torch.Generator().manual_seed(0)

    def act(obs):
        a, lp = sample_actions(model.policy(obs), generator)
        return {keys.ACTION: a, keys.ACTION_LOG_PROB: lp}

    runner = make_env_runner(env, B, 0, 1, model, act, T)
    try:
        runner.unroll(act, T)  # warm-up: first reset, allocations
        n, t0 = 0, time.perf_counter()
        while n < frames:
            n += runner.unroll(act, T)[0].numel()
        return n / (time.perf_counter() - t0)
    finally:
        runner.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=300_000, help="impala training frames per path (0: skip training)")
    ap.add_argument("--collect-frames", type=int, default=60_000, help="frames each path collects alone")
    ap.add_argument("--factory", action="append", help="TorchRL env factory module:function (repeatable)")
    args = ap.parse_args()
    envs = ["CartPole-v1", *(args.factory or FACTORIES)]
    width = max(map(len, envs))
    print(f"collecting only, one process, 32 envs x 32 steps per unroll ({args.collect_frames:,} frames):")
    collected = {env: collect_fps(env, args.collect_frames) for env in envs}
    for env, fps in collected.items():
        print(f"  {env:<{width}}  {fps:10,.0f} frames/s  ({fps / collected['CartPole-v1']:.2f}x the gymnasium path)")
    if args.frames:
        print(f"impala training, torchrun 3 processes ({args.frames:,} frames):")
        trained = {env: train_summary("impala", args.frames, env=env) for env in envs}
        for env, s in trained.items():
            print(f"  {env:<{width}}  {s['fps']:10,.0f} frames/s  ({s['fps'] / trained['CartPole-v1']['fps']:.2f}x; "
                  f"lag mean {s['policy_lag_mean']:.2f}, {s['learner_updates']} updates)")


if __name__ == "__main__":
    main()
