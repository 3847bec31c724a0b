"""Benchmark: env steps/s of every actor-critic recipe on HalfCheetah-v5 (MuJoCo, continuous actions),
beside TorchRL's best collector layout and the env-only limit, all in one run.

    python experiments/bench_mujoco.py [--seconds 90] [--recipes sf,impala,seed,a3c,vecenv]
        [--torchrl-frames 100000] [--env HalfCheetah-v5] [--out runs/bench_mujoco]

In one invocation (ratios hold within one run: the machines are shared):

(c) the env-only limit: ``cores`` processes each stepping gymnasium's ``SyncVectorEnv(16)`` of the
    env with random actions, no policy (wall clock, summed): no system here collects faster;
(a) TorchRL collecting with the recipes' Gaussian policy (``distrl.nn.models.ActorCritic`` over 17
    observations, 6 actions, as a TorchRL ``ProbabilisticActor``) in the layouts a TorchRL user
    would try (``MultiSyncCollector`` over ``cores`` workers of ``GymWrapper(SyncVectorEnv(n))`` or
    ``SerialEnv(8 x GymEnv)``, and one in-process ``Collector``), timed from the first batch, one
    torch thread a process (``experiments/measure.py``): collection alone, no learning;
then every recipe with its ``mujoco`` preset under ``torchrun`` for ``--seconds`` (``summary.json``'s
``fps_running``: trained env steps/s from the learner's first batch to its last; no evaluation),
each as a fraction of the limit and a ratio to TorchRL's best collector (which learns nothing:
a recipe at 1.0x collects and trains as fast as TorchRL only collects). Results: ``results.json``
and ``results.md`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.baselines import _measure, env_only_fps  # noqa: E402
from experiments.measure import one_thread, train  # noqa: E402

RECIPES = ("sf", "impala", "seed", "a3c", "vecenv")
NPROC = {"sf": 4, "impala": 3, "seed": 3, "a3c": 3, "vecenv": 2}  # vecenv: one rank a core (CPU envs)


def _vector_env(env_id: str, n: int):
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    # TorchRL's GymWrapper reads SAME_STEP autoreset correctly (NEXT_STEP it refuses)
    return SyncVectorEnv([lambda: gym.make(env_id) for _ in range(n)], autoreset_mode=AutoresetMode.SAME_STEP)


def _env_only_worker(env_id: str, n: int, seconds: float, result) -> None:
    env = _vector_env(env_id, n)
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(256, n, *env.single_action_space.shape)).astype(np.float32)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[steps % 256])
        steps += 1
    result.put(steps * n / (time.perf_counter() - start))


def _policy(env_id: str):
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.modules import IndependentNormal, ProbabilisticActor

    from distrl.envs.gym import env_info
    from distrl.nn.models import ActorCritic
    from distrl.nn.trained_policy import _LocScale as LocScale

    info = env_info(env_id)
    net = ActorCritic.for_env(info).policy
    module = TensorDictModule(torch.nn.Sequential(net, LocScale(info.action_dim)), in_keys=["observation"],
                              out_keys=["loc", "scale"])
    return ProbabilisticActor(module, in_keys=["loc", "scale"], distribution_class=IndependentNormal,
                              return_log_prob=True)


def _wrapped(env_id: str, n: int):
    from torchrl.envs import DoubleToFloat, GymWrapper, TransformedEnv

    return TransformedEnv(GymWrapper(_vector_env(env_id, n)), DoubleToFloat())


def _serial(env_id: str, n: int):
    from torchrl.envs import DoubleToFloat, GymEnv, SerialEnv, TransformedEnv

    return TransformedEnv(SerialEnv(n, lambda: GymEnv(env_id)), DoubleToFloat())


def _collector_fps(make_env, envs: int, workers: int, frames: int, env_id: str) -> float:
    from torchrl.collectors import Collector, MultiSyncCollector

    one_thread()
    policy = _policy(env_id)
    batch = max(workers, 1) * envs * 32
    if workers == 0:
        collector = Collector(make_env(), policy, frames_per_batch=batch, total_frames=-1)
    else:
        collector = MultiSyncCollector([make_env] * workers, policy, frames_per_batch=batch, total_frames=-1,
                                       num_threads=1, num_sub_threads=1)
    return _measure(collector, frames)


def torchrl_layouts(env_id: str, procs: int, frames: int) -> dict[str, float]:
    """Collection frames/s of each layout, measured one after another."""
    layouts = {
        f"MultiSyncCollector {procs} x SerialEnv(8 x GymEnv)": partial(_collector_fps, partial(_serial, env_id, 8), 8, procs),
        f"MultiSyncCollector {procs} x GymWrapper(SyncVectorEnv(16))":
            partial(_collector_fps, partial(_wrapped, env_id, 16), 16, procs),
        "Collector 1 x GymWrapper(SyncVectorEnv(32))": partial(_collector_fps, partial(_wrapped, env_id, 32), 32, 0),
    }
    out = {}
    for name, measure in layouts.items():
        try:
            out[name] = measure(frames, env_id)
        except Exception as e:  # a layout TorchRL refuses is reported, not fatal
            print(f"  torchrl {name}: failed: {type(e).__name__}: {e}", flush=True)
    return out


def run_recipe(recipe: str, env_id: str, seconds: float) -> dict:
    extra = ["--max-time-s", str(seconds), "--set", "run.eval_interval_s=0", "--set", "run.early_stop=false"]
    try:
        return train(recipe, 10**10, nproc=NPROC[recipe], extra=extra, env=env_id)
    except SystemExit as e:
        return {"error": str(e)[-2000:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="HalfCheetah-v5")
    ap.add_argument("--seconds", type=float, default=90.0, help="wall-clock seconds each recipe trains")
    ap.add_argument("--recipes", default=",".join(RECIPES))
    ap.add_argument("--torchrl-frames", type=int, default=100_000, help="frames each TorchRL layout collects (0: skip)")
    ap.add_argument("--out", default="runs/bench_mujoco")
    args = ap.parse_args()
    one_thread()
    cores = len(__import__("os").sched_getaffinity(0))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"env": args.env, "cores": cores, "seconds": args.seconds}
    # cores processes x SyncVectorEnv(16), random actions (experiments/baselines.py)
    res["env_only_limit"] = limit = env_only_fps(cores, 16, 10.0, worker=partial(_env_only_worker, args.env))
    print(f"env-only limit: {cores} x SyncVectorEnv(16), random actions: {limit:,.0f} steps/s", flush=True)
    res["torchrl"] = torchrl_layouts(args.env, cores, args.torchrl_frames) if args.torchrl_frames else {}
    for name, fps in res["torchrl"].items():
        print(f"  torchrl {name:48s} {fps:8,.0f} steps/s ({fps / limit:.0%} of the limit)", flush=True)
    best = max(res["torchrl"].values(), default=float("nan"))
    res["recipes"] = {}
    for recipe in args.recipes.split(","):
        s = run_recipe(recipe, args.env, args.seconds)
        res["recipes"][recipe] = s
        if "error" in s:
            print(f"  {recipe}: failed\n{s['error']}", flush=True)
            continue
        fps = s["fps_running"]
        print(f"  {recipe:7s} ({NPROC[recipe]} procs) {fps:8,.0f} trained steps/s = {fps / limit:.0%} of the limit, "
              f"{fps / best:.2f}x TorchRL's best collector", flush=True)
    lines = [f"# {args.env}: env steps/s ({cores} cores, {args.seconds:.0f} s a recipe)", "",
             "| system | steps/s | of the env-only limit | vs TorchRL's best collector |", "|---|---|---|---|",
             f"| env-only limit | {limit:,.0f} | 100% | |"]
    lines += [f"| TorchRL {k} (collects only) | {v:,.0f} | {v / limit:.0%} | {v / best:.2f}x |" for k, v in res["torchrl"].items()]
    lines += [f"| {r} ({NPROC[r]} procs, trains) | {s['fps_running']:,.0f} | {s['fps_running'] / limit:.0%} | "
              f"{s['fps_running'] / best:.2f}x |" for r, s in res["recipes"].items() if "error" not in s]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
