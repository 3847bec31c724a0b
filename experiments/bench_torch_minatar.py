"""Steps per second of the torch-native MinAtar games against the ``minatar`` package.

    python -m experiments.bench_torch_minatar [--num-envs 4096] [--seconds 3] [--rounds 3]
        [--threads 2] [--device cpu] [--games asterix,seaquest]

Timed as ``experiments/kit/measure.py`` says (one torch thread unless ``--threads``; wall and CPU
clocks named), random actions throughout:

1. the package: one ``minatar.Environment`` (sticky actions 0.1, as the ``-v1`` ids) in a
   Python loop, ``act`` then ``state()`` (the observation a learner needs) each step, reset when
   it terminates, uniformly random actions from the minimal set;
2. the torch env: ``make_torch_env(id, num_envs)``'s lean ``step_autoreset`` path, a pool of
   random action tensors already on the device, ``num_envs`` env-steps a call;

each in ``--rounds`` windows of ``--seconds``, round robin so that a burst of load from other
jobs hits every row alike; the best window of each row is reported, and the ratios of the torch
env to the package (wall clock). A ``--threads`` row means something on idle cores only: when
another process holds a core, every parallel op waits for its descheduled thread.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from distrl.envs.torch_envs import make_torch_env
from experiments.kit.measure import Meter, one_thread, round_robin

GAMES = {
    "MinAtar/Breakout-v1": "breakout",
    "MinAtar/SpaceInvaders-v1": "space_invaders",
    "MinAtar/Asterix-v1": "asterix",
    "MinAtar/Freeway-v1": "freeway",
    "MinAtar/Seaquest-v1": "seaquest",
}


def package_stepper(game: str):
    """One package env stepped in Python; each call is one env-step."""
    from minatar import Environment  # here: the minatar package is an optional extra (distrl[minatar])

    env = Environment(game)
    env.seed(0)
    env.reset()
    actions = env.minimal_action_set()
    rng = np.random.RandomState(1)
    pool = [actions[i] for i in rng.randint(len(actions), size=4096)]
    t = [0]

    def step() -> int:
        _, terminated = env.act(pool[t[0] % len(pool)])
        env.state()
        if terminated:
            env.reset()
        t[0] += 1
        return 1

    return step


def torch_stepper(env_id: str, num_envs: int, device: torch.device, calls: int = 8):
    """The torch env's ``step_autoreset``; each call is ``calls`` steps of ``num_envs`` envs
    (then a device synchronisation on CUDA, so that the wall clock counts the work)."""
    env = make_torch_env(env_id, num_envs, device=device, seed=0)
    env.reset_all()
    gen = torch.Generator().manual_seed(0)
    pool = [torch.randint(env.num_actions, (num_envs,), generator=gen).to(device) for _ in range(64)]
    t = [0]

    def step() -> int:
        for _ in range(calls):
            env.step_autoreset(pool[t[0] % len(pool)])
            t[0] += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return calls * num_envs

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-envs", type=int, default=4096, help="envs of the torch env")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of one measuring window")
    ap.add_argument("--rounds", type=int, default=3, help="windows per row, round robin; the best is reported")
    ap.add_argument("--threads", type=int, default=0, help="also time the torch env with this many torch threads")
    ap.add_argument("--device", default="cpu", help="device of the torch env")
    ap.add_argument("--games", default=",".join(GAMES.values()), help="comma-separated package names of the games")
    args = ap.parse_args()
    games = {env_id: game for env_id, game in GAMES.items() if game in args.games.split(",")}
    one_thread()
    device = torch.device(args.device)
    calls = 8  # steps of the torch env per torch_stepper call
    steps = calls * args.num_envs
    meters = []
    for env_id, game in games.items():
        meters.append(Meter(f"package {game}, 1 env", package_stepper(game), 1))
        meters.append(
            Meter(
                f"torch {game}, {args.num_envs} envs, 1 thread",
                torch_stepper(env_id, args.num_envs, device, calls),
                steps,
            )
        )
        if args.threads > 1:
            meters.append(
                Meter(
                    f"torch {game}, {args.num_envs} envs, {args.threads} threads",
                    torch_stepper(env_id, args.num_envs, device, calls),
                    steps,
                    threads=args.threads,
                )
            )
    best = round_robin(meters, args.rounds, args.seconds)  # warm-up first: allocations, first resets
    print(f"env-steps/s, random actions, best of {args.rounds} windows of {args.seconds:g} s (torch env on {device}):")
    width = max(map(len, best))
    for name, (wall, cpu) in best.items():
        print(f"  {name:<{width}}  {wall:14,.0f} wall  {cpu:14,.0f} per CPU-second", flush=True)
    print("torch env / package (wall):")
    for game in games.values():
        package = best[f"package {game}, 1 env"][0]
        for name, (wall, _) in best.items():
            if name.startswith(f"torch {game},"):
                print(f"  {name}: {wall / package:8.1f}x")


if __name__ == "__main__":
    main()
