"""Benchmark: env steps/s of every actor-critic recipe on HalfCheetah-v5 (MuJoCo, continuous actions),
beside TorchRL's best collector layout and the env-only limit, all in one run.

    python -m experiments.bench_mujoco [--seconds 90] [--recipes sf,impala,seed,a3c,vecenv]
        [--torchrl-frames 100000] [--env HalfCheetah-v5] [--out runs/bench_mujoco]

In one invocation (ratios hold within one run: the machines are shared):

(c) the env-only limit: ``cores`` processes each stepping gymnasium's ``SyncVectorEnv(16)`` of the
    env with random actions, no policy (wall clock, summed): no system here collects faster;
(a) TorchRL collecting with the recipes' Gaussian policy (``distrl.nn.models.ActorCritic`` over 17
    observations, 6 actions, as a TorchRL ``ProbabilisticActor``) in the layouts a TorchRL user
    would try (``MultiSyncCollector`` over ``cores`` workers of ``GymWrapper(SyncVectorEnv(n))`` or
    ``SerialEnv(8 x GymEnv)``, and one in-process ``Collector``), timed from the first batch, one
    torch thread a process (``experiments/kit/measure.py``): collection alone, no learning;
then every recipe with its ``mujoco`` preset under ``torchrun`` for ``--seconds`` (``summary.json``'s
``fps_running``: trained env steps/s from the learner's first batch to its last; no evaluation),
each as a fraction of the limit and a ratio to TorchRL's best collector (which learns nothing:
a recipe at 1.0x collects and trains as fast as TorchRL only collects). Results: ``results.json``
and ``results.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic
from experiments.kit.measure import cores, one_thread
from experiments.kit.runs import train
from experiments.kit.torchrl_layouts import (
    collector,
    env_only_fps,
    first_batch_fps,
    gaussian_actor,
    gym_env,
    gym_vector_env,
    serial_env,
    vector_env_in_torchrl,
)

RECIPES = ("sf", "impala", "seed", "a3c", "vecenv")
NPROC = {"sf": 4, "impala": 3, "seed": 3, "a3c": 3, "vecenv": 2}  # vecenv: one rank a core (CPU envs)


def collector_fps(make_env, envs: int, workers: int, frames: int, env_id: str) -> float:
    """Frames/s of TorchRL collecting ``env_id`` alone with the recipes' Gaussian policy."""
    policy = gaussian_actor(ActorCritic.for_env(env_info(env_id)).policy)
    batch = max(workers, 1) * envs * 32
    return first_batch_fps(collector(make_env, policy, batch, workers), frames=frames)


def torchrl_layouts(env_id: str, procs: int, frames: int) -> dict[str, float]:
    """Collection frames/s of each layout, measured one after another."""
    serial = partial(serial_env, 8, partial(gym_env, env_id), to_float32=True)

    def vector(n: int):
        return partial(vector_env_in_torchrl, partial(gym_vector_env, env_id, n), to_float32=True)

    layouts = {
        f"MultiSyncCollector {procs} x SerialEnv(8 x GymEnv)": partial(collector_fps, serial, 8, procs),
        f"MultiSyncCollector {procs} x GymWrapper(SyncVectorEnv(16))": partial(collector_fps, vector(16), 16, procs),
        "Collector 1 x GymWrapper(SyncVectorEnv(32))": partial(collector_fps, vector(32), 32, 0),
    }
    out = {}
    for name, measure in layouts.items():
        try:
            out[name] = measure(frames, env_id)
        except Exception as e:  # a layout TorchRL refuses is reported, not fatal
            print(f"  torchrl {name}: failed: {type(e).__name__}: {e}", flush=True)
    return out


def run_recipe(recipe: str, env_id: str, seconds: float) -> dict:
    """A recipe's ``summary.json`` after ``seconds`` of training on ``env_id``; ``{"error": ...}`` if it failed."""
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
    n_cores = cores()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"env": args.env, "cores": n_cores, "seconds": args.seconds}
    # cores processes x SyncVectorEnv(16), random actions (experiments/kit/torchrl_layouts.py)
    res["env_only_limit"] = limit = env_only_fps(partial(gym_vector_env, args.env, 16), n_cores, 10.0)
    print(f"env-only limit: {n_cores} x SyncVectorEnv(16), random actions: {limit:,.0f} steps/s", flush=True)
    res["torchrl"] = torchrl_layouts(args.env, n_cores, args.torchrl_frames) if args.torchrl_frames else {}
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
        print(
            f"  {recipe:7s} ({NPROC[recipe]} procs) {fps:8,.0f} trained steps/s = {fps / limit:.0%} of the limit, "
            f"{fps / best:.2f}x TorchRL's best collector",
            flush=True,
        )
    lines = [
        f"# {args.env}: env steps/s ({n_cores} cores, {args.seconds:.0f} s a recipe)",
        "",
        "| system | steps/s | of the env-only limit | vs TorchRL's best collector |",
        "|---|---|---|---|",
        f"| env-only limit | {limit:,.0f} | 100% | |",
    ]
    lines += [
        f"| TorchRL {k} (collects only) | {v:,.0f} | {v / limit:.0%} | {v / best:.2f}x |"
        for k, v in res["torchrl"].items()
    ]
    lines += [
        f"| {r} ({NPROC[r]} procs, trains) | {s['fps_running']:,.0f} | {s['fps_running'] / limit:.0%} | "
        f"{s['fps_running'] / best:.2f}x |"
        for r, s in res["recipes"].items()
        if "error" not in s
    ]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
