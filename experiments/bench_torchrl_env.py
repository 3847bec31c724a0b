"""Benchmark of door 1: the gymnasium-id fast path against the TorchRL ``Collector`` path over a
user's env factory, side by side, CartPole-v1 with the impala actor's 2x64 policy, and both
against TorchRL's best collector layout and the env-only limit.

    python -m experiments.bench_torchrl_env [--frames 300000] [--collect-frames 60000]
        [--collector-frames 150000] [--factory distrl.envs.torchrl_factories:cartpole_with_stepcounter ...]

Timed as ``experiments/kit/measure.py`` says (one thread a process; from the first batch on):
1. TorchRL's collectors in every layout of ``experiments/kit/yardstick.py`` and the env-only limit;
2. collecting only, one process, ``algo.envs_per_actor`` envs (32) and ``algo.unroll_length``
   steps (32) per unroll, the impala actor's own sampling: ``EnvRunner`` (gymnasium
   ``SyncVectorEnv``) against ``CollectorRunner`` (TorchRL ``Collector``) over each factory, after
   one unroll left out; frames per wall-clock second and per CPU-second of this process;
3. training: ``torchrun --nproc-per-node=3 launch/train.py impala`` for ``--frames`` frames with
   ``--env CartPole-v1`` and with ``--env FACTORY``; trained frames/s from each run's
   ``summary.json`` (``fps_running``: from the learner's first batch to its last);
4. TorchRL's best layout once more; the ratios are against the higher of its two figures.

The default factories: one ``GymEnv`` behind a ``StepCounter`` (distrl batches it in a
``SerialEnv``: TorchRL's per-env cost on every frame), and a ``SyncVectorEnv`` inside
``GymWrapper`` behind a ``StepCounter`` (the factory batches itself: TorchRL's fast CPU layout).
"""

from __future__ import annotations

import argparse

import torch

from distrl.data import keys
from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic, sample_actions
from distrl.roles.env_runner import make_env_runner
from experiments.kit.measure import Rate, one_thread, timed
from experiments.kit.runs import train, trained_fps
from experiments.kit.yardstick import Yardstick

FACTORIES = (
    "distrl.envs.torchrl_factories:cartpole_with_stepcounter",
    "distrl.envs.torchrl_factories:cartpole_vector_with_stepcounter",
)


def collect_rate(env: str, frames: int, B: int = 32, T: int = 32) -> Rate:
    """One actor's envs alone (no learner, no transport) under the impala actor's policy."""
    one_thread()
    info = env_info(env)
    model, generator = ActorCritic(info.obs_dim, info.num_actions), torch.Generator().manual_seed(0)

    def act(obs):
        a, lp = sample_actions(model.policy(obs), generator)
        return {keys.ACTION: a, keys.ACTION_LOG_PROB: lp}

    runner = make_env_runner(env, B, 0, 1, model, act, T)
    try:  # the first unroll (first reset, allocations) is left out
        return timed(lambda: runner.unroll(act, T)[0].numel(), frames=frames)
    finally:
        runner.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=300_000, help="impala training frames per path (0: skip training)")
    ap.add_argument("--collect-frames", type=int, default=60_000, help="frames each path collects alone")
    ap.add_argument(
        "--collector-frames",
        type=int,
        default=150_000,
        help="frames each TorchRL layout gathers after its first batch (0: skip TorchRL)",
    )
    ap.add_argument("--factory", action="append", help="TorchRL env factory module:function (repeatable)")
    args = ap.parse_args()
    envs = ["CartPole-v1", *(args.factory or FACTORIES)]
    width = max(map(len, envs))
    yard = Yardstick(args.collector_frames)
    yard.before()
    print(
        f"collecting only, one process, 32 envs x 32 steps per unroll ({args.collect_frames:,} frames), "
        f"frames/s wall | per CPU-second:"
    )
    collected = {env: collect_rate(env, args.collect_frames) for env in envs}
    base = collected["CartPole-v1"]
    for env, r in collected.items():
        print(
            f"  {env:<{width}}  {r.wall:10,.0f} | {r.cpu:10,.0f}  ({r.wall / base.wall:.2f}x the gymnasium path, wall)",
            flush=True,
        )
    trained = {}
    if args.frames:
        print(f"impala training, torchrun 3 processes ({args.frames:,} frames):")
        for env in envs:
            s = trained[env] = train("impala", args.frames, env=env)
            print(
                f"  {env:<{width}}  {trained_fps(s):10,.0f} trained frames/s from its first batch "
                f"({trained_fps(s) / trained_fps(trained['CartPole-v1']):.2f}x; lag mean {s['policy_lag_mean']:.2f}, "
                f"{s['learner_updates']} updates)",
                flush=True,
            )
    yard.after()
    print(f"ratios against {yard.best}, frames/s from the first batch:")
    for env, r in collected.items():
        print(f"  collecting only, {env + ':':<{width + 1}} {r.wall:10,.0f} frames/s (wall) = {yard.ratio(r.wall)}")
    for env, s in trained.items():
        print(yard.line(f"impala training on {env}", s))


if __name__ == "__main__":
    main()
