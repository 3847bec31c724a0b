"""The yardsticks every benchmark prints: TorchRL's collectors in the layouts a knowledgeable user
would try (the best one found in the same run is the one to beat), and the env-only limit.

    python experiments/baselines.py [--frames 200000] [--envs 8,64,256] [--procs 2]

Layouts, all collecting only (no learning) with the recipes' 2x64 policy MLP on CartPole-v1:

- ``MultiSyncCollector``, ``procs`` workers x ``SerialEnv(8 x GymEnv)`` (the layout the first
  benchmarks used: one TorchRL env per gymnasium env, which costs TorchRL's per-env overhead);
- ``MultiSyncCollector``, ``procs`` workers x ``GymWrapper(SyncVectorEnv(n))`` for every ``n`` in
  ``--envs`` (gymnasium's vector env inside the collector: one TorchRL step per n env steps);
- ``Collector``, 1 x ``GymWrapper(SyncVectorEnv(max n))`` (no worker processes).

The env-only limit is ``procs`` processes each stepping ``SyncVectorEnv(max n)`` with random
actions and no policy at all: no RL system on this machine collects faster than that.

Timing (``experiments/measure.py``, shared by every benchmark): one torch thread in this process
before the first layout is built (the collector's workers get one each, TorchRL's default), and
every layout timed by the wall clock from its first batch on (worker start, first resets and the
first batch left out), as distrl's runs are by ``fps_running``. The limit is wall-clock too: each
process's steps over its own seconds, summed.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # distrl and experiments/ from this checkout

from experiments.measure import ENV_ID, one_thread  # noqa: E402


def _vector_env(n: int):
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    # TorchRL's GymWrapper refuses NEXT_STEP autoreset: SAME_STEP is what it reads correctly.
    return SyncVectorEnv([lambda: gym.make(ENV_ID) for _ in range(n)], autoreset_mode=AutoresetMode.SAME_STEP)


def _policy():
    from tensordict.nn import TensorDictModule
    from torch.distributions import Categorical
    from torchrl.modules import ProbabilisticActor

    from distrl.nn.models import ActorCritic

    net = ActorCritic(4, 2).policy
    return ProbabilisticActor(TensorDictModule(net, in_keys=["observation"], out_keys=["logits"]),
                              in_keys=["logits"], distribution_class=Categorical, return_log_prob=True)


def _serial_env(n: int):
    from torchrl.envs import GymEnv, SerialEnv

    return SerialEnv(n, lambda: GymEnv(ENV_ID, categorical_action_encoding=True))


def _wrapped_vector_env(n: int):
    from torchrl.envs import GymWrapper

    return GymWrapper(_vector_env(n), categorical_action_encoding=True)


def _measure(collector, frames: int) -> float:
    """Frames per wall-clock second after the first batch, over ``frames`` frames."""
    try:
        it = iter(collector)
        next(it)  # left out, as distrl's first batch is: worker start, first resets
        start, done = time.perf_counter(), 0
        while done < frames:
            done += next(it).numel()
        return done / (time.perf_counter() - start)
    finally:
        collector.shutdown()
        one_thread()  # a MultiSyncCollector's shutdown gives this process its threads back


def collector_fps(make_env: Callable, envs_per_worker: int, workers: int, frames: int) -> float:
    """Frames/s of TorchRL collecting alone: ``MultiSyncCollector`` over ``workers`` processes, or a
    plain ``Collector`` in this process when ``workers == 0``."""
    from torchrl.collectors import Collector, MultiSyncCollector

    one_thread()  # before the first layout is built, not after it
    policy = _policy()
    batch = max(workers, 1) * envs_per_worker * max(64 // max(envs_per_worker // 8, 1), 8)
    if workers == 0:
        collector = Collector(make_env(), policy, frames_per_batch=batch, total_frames=-1)
    else:  # one thread here and one in each worker, as distrl's processes have
        collector = MultiSyncCollector([lambda: make_env()] * workers, policy, frames_per_batch=batch, total_frames=-1,
                                       num_threads=1, num_sub_threads=1)
    return _measure(collector, frames)


def layouts(envs: tuple[int, ...] = (64, 256), procs: int = 2) -> dict[str, Callable[[int], float]]:
    """Every layout by name: ``measure(frames) -> frames/s``."""
    from functools import partial

    out = {f"MultiSyncCollector {procs} x SerialEnv(8 x GymEnv)": partial(collector_fps, partial(_serial_env, 8), 8, procs)}
    for n in envs:
        out[f"MultiSyncCollector {procs} x GymWrapper(SyncVectorEnv({n}))"] = partial(
            collector_fps, partial(_wrapped_vector_env, n), n, procs)
    n = max(envs)
    out[f"Collector 1 x GymWrapper(SyncVectorEnv({n}))"] = partial(collector_fps, partial(_wrapped_vector_env, n), n, 0)
    return out


def torchrl_layouts(frames: int, envs: tuple[int, ...] = (64, 256), procs: int = 2) -> dict[str, float]:
    """Every layout's frames/s, measured one after another in this call."""
    return {name: measure(frames) for name, measure in layouts(envs, procs).items()}


def _env_only_worker(n: int, seconds: float, result: mp.Queue) -> None:
    env = _vector_env(n)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=(1024, n))
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[steps % 1024])
        steps += 1
    result.put(steps * n / (time.perf_counter() - start))


def env_only_fps(procs: int = 2, envs: int = 256, seconds: float = 5.0, worker: Callable = _env_only_worker) -> float:
    """The limit: ``procs`` processes stepping ``SyncVectorEnv(envs)`` with random actions, summed.
    ``worker(envs, seconds, queue)`` steps one process's envs and puts its steps/s (CartPole's by
    default; ``experiments/bench_mujoco.py`` passes its env's)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    workers = [ctx.Process(target=worker, args=(envs, seconds, q)) for _ in range(procs)]
    for w in workers:
        w.start()
    total = sum(q.get(timeout=seconds + 60) for _ in workers)
    for w in workers:
        w.join()
    return total


def report(frames: int, envs: tuple[int, ...] = (64, 256), procs: int = 2) -> tuple[str, float, float]:
    """Measure and print every layout and the limit; returns ``(best layout, its fps, limit fps)``."""
    layouts = torchrl_layouts(frames, envs, procs)
    limit = env_only_fps(procs, max(envs))
    best = max(layouts, key=layouts.get)
    for name, fps in layouts.items():
        mark = "  <- best" if name == best else ""
        print(f"  torchrl {name:52s} {fps:10,.0f} frames/s ({fps / limit:5.1%} of the limit){mark}", flush=True)
    print(f"  env-only limit: {procs} processes x SyncVectorEnv({max(envs)}), random actions {limit:10,.0f} steps/s",
          flush=True)
    print("  (wall-clock rates; the layouts from their first batch on)", flush=True)
    return best, layouts[best], limit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200_000, help="frames each collector layout gathers")
    ap.add_argument("--envs", default="64,256", help="envs per worker of the vector-env layouts")
    ap.add_argument("--procs", type=int, default=2, help="collector worker processes (and env-only processes)")
    args = ap.parse_args()
    one_thread()
    report(args.frames, tuple(int(n) for n in args.envs.split(",")), args.procs)


if __name__ == "__main__":
    main()
