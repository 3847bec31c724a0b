"""Benchmark: the CPU cost of one frame in each stage of an IMPALA-style pipeline, and the ceiling
on training fps that those costs put on a machine with ``--cores`` cores.

    python -m experiments.bench_costs [--cores 2] [--envs 32,128,256] [--seconds 3]

Each stage runs alone on one thread (``torch.set_num_threads(1)``), one after another, one call
left out, then called for ``--seconds`` of wall time (``experiments/kit/measure.py``'s ``timed``):

- ``env``: gymnasium ``SyncVectorEnv(B)`` stepped with pre-sampled actions (no policy);
- ``actor``: distrl's :class:`~distrl.roles.env_runner.EnvRunner` unrolling with the 2x64 policy in numpy
  (env + policy forward + sampling + the trajectory's bookkeeping), as an impala actor does;
- ``learn``: one impala update (V-trace loss, backward, per-tower clip, Adam) per ``B x T`` frames.

Each stage's cost is printed twice: microseconds of this process's CPU time per frame
(``time.process_time``), and of wall time (``time.perf_counter``), which is higher by whatever
share of the core other jobs took. A pipeline that trains on every frame it collects spends at
least ``actor + learn`` CPU-seconds per frame, whatever its layout, so ``cores / (actor + learn)``
(CPU figures) bounds its training fps on this machine (transport, serialisation and scheduling
only lower it). The script prints that ceiling beside the env-only one (``cores / env``).
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import numpy as np
import torch

from distrl.algorithms.impala import impala_loss
from distrl.data import keys
from distrl.envs.gym import make_vector_env
from distrl.nn.models import ActorCritic, clip_towers
from distrl.nn.numpy_policy import NumpyPolicy
from distrl.roles.env_runner import EnvRunner
from experiments.kit.measure import Rate, ideal_fps, one_thread, timed


def stage_costs(B: int, T: int, seconds: float) -> dict[str, Rate]:
    """Each stage's :class:`Rate` (frames by wall and CPU time), ``B`` envs, unrolls of ``T`` steps."""
    one_thread()
    env = make_vector_env("CartPole-v1", B, 0)
    actions = np.random.default_rng(0).integers(0, 2, size=(64, B))

    def env_steps() -> int:
        for a in actions:
            env.step(a)
        return len(actions) * B

    model = ActorCritic(4, 2)
    fast = NumpyPolicy(model.policy, 0)  # what the impala actor acts with (distrl/nn/numpy_policy.py)

    def act(obs):
        a, lp = fast.act(obs)
        return {keys.ACTION: a, keys.ACTION_LOG_PROB: lp}

    runner = EnvRunner("CartPole-v1", B, 0, 1)

    def unroll() -> int:
        with torch.no_grad():
            runner.unroll(act, T)
        return B * T

    traj = runner.unroll(act, T)[0]
    optim = torch.optim.Adam(model.parameters(), lr=5e-4, eps=1e-5)

    def learn() -> int:
        out = impala_loss(
            model,
            traj,
            SimpleNamespace(
                gamma=0.99,
                rho_bar=1.0,
                c_bar=1.0,
                value_coef=0.5,
                entropy_coef=0.01,
                normalize_advantage=False,
                reward_scale=0.1,
            ),
        )
        optim.zero_grad(set_to_none=True)
        out["loss"].backward()
        clip_towers(model.tower_parameters(), 1.0)
        optim.step()
        return B * T

    costs = {name: timed(fn, seconds) for name, fn in (("env", env_steps), ("actor", unroll), ("learn", learn))}
    env.close()
    runner.close()
    return costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", type=int, default=2, help="cores the ceiling is computed for")
    ap.add_argument("--envs", default="32,128,256", help="envs per vector (B), comma separated")
    ap.add_argument("--unroll", type=int, default=16, help="steps per unroll (T); the learner's batch is B x T")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds each stage runs")
    args = ap.parse_args()
    print(
        f"us per frame, CPU time of this process (wall time in brackets); ceilings from the CPU figures, "
        f"{args.cores} cores"
    )
    print(f"{'B':>5} {'T':>4} {'env':>16} {'actor':>16} {'learn':>16} {'env-only ceiling':>17} {'train ceiling':>14}")
    for B in (int(b) for b in args.envs.split(",")):
        c = stage_costs(B, args.unroll, args.seconds)
        cpu = {k: r.us_per_frame("cpu") for k, r in c.items()}
        cell = lambda k: f"{cpu[k]:.2f} ({c[k].us_per_frame('wall'):.2f})"  # noqa: E731
        env_ceiling = ideal_fps({"env": cpu["env"]}, args.cores)
        train_ceiling = ideal_fps({"actor": cpu["actor"], "learn": cpu["learn"]}, args.cores)
        print(
            f"{B:>5} {args.unroll:>4} {cell('env'):>16} {cell('actor'):>16} {cell('learn'):>16} "
            f"{env_ceiling:>15,.0f}/s {train_ceiling:>12,.0f}/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
