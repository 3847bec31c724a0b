"""The yardstick every CartPole benchmark holds distrl against (design rule 9): TorchRL's collectors
in the layouts a knowledgeable user would try, the best one found in the same run the one to beat,
and the env-only limit.

Layouts, all collecting only (no learning) with the recipes' 2x64 policy MLP on CartPole-v1, built
from :mod:`experiments.kit.torchrl_layouts`:

- ``MultiSyncCollector``, ``procs`` workers x ``SerialEnv(8 x GymEnv)`` (the layout the first
  benchmarks used: one TorchRL env per gymnasium env, which costs TorchRL's per-env overhead);
- ``MultiSyncCollector``, ``procs`` workers x ``GymWrapper(SyncVectorEnv(n))`` for every ``n`` in
  ``envs`` (gymnasium's vector env inside the collector: one TorchRL step per n env steps);
- ``Collector``, 1 x ``GymWrapper(SyncVectorEnv(max n))`` (no worker processes).

The env-only limit is ``procs`` processes each stepping ``SyncVectorEnv(max n)`` with random
actions and no policy at all. Every layout is timed by the wall clock from its first batch on, as
distrl's runs are by ``fps_running``; the limit is wall-clock too: each process's steps over its
own seconds, summed. ``python -m experiments.baselines`` prints them alone.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Optional

from distrl.nn.models import ActorCritic
from experiments.kit.measure import one_thread
from experiments.kit.runs import ENV_ID, dropped, trained_fps
from experiments.kit.torchrl_layouts import (
    categorical_actor,
    collector,
    env_only_fps,
    first_batch_fps,
    gym_env,
    gym_vector_env,
    serial_env,
    vector_env_in_torchrl,
)


def collector_fps(make_env: Callable, envs_per_worker: int, workers: int, frames: int) -> float:
    """Frames/s of TorchRL collecting CartPole alone with the recipes' policy: ``MultiSyncCollector``
    over ``workers`` processes, or a plain ``Collector`` in this process when ``workers == 0``."""
    one_thread()  # before the first layout is built, not after it
    policy = categorical_actor(ActorCritic(4, 2).policy)
    batch = max(workers, 1) * envs_per_worker * max(64 // max(envs_per_worker // 8, 1), 8)
    return first_batch_fps(collector(make_env, policy, batch, workers), frames=frames)


def _vector(n: int) -> Callable:
    """A picklable factory of ``GymWrapper(SyncVectorEnv(n))`` of CartPole, for a collector's workers."""
    return partial(vector_env_in_torchrl, partial(gym_vector_env, ENV_ID, n))


def layouts(envs: tuple[int, ...] = (64, 256), procs: int = 2) -> dict[str, Callable[[int], float]]:
    """Every layout by name: ``measure(frames) -> frames/s``."""
    out = {
        f"MultiSyncCollector {procs} x SerialEnv(8 x GymEnv)": partial(
            collector_fps, partial(serial_env, 8, partial(gym_env, ENV_ID)), 8, procs
        )
    }
    for n in envs:
        name = f"MultiSyncCollector {procs} x GymWrapper(SyncVectorEnv({n}))"
        out[name] = partial(collector_fps, _vector(n), n, procs)
    n = max(envs)
    out[f"Collector 1 x GymWrapper(SyncVectorEnv({n}))"] = partial(collector_fps, _vector(n), n, 0)
    return out


def torchrl_layouts(frames: int, envs: tuple[int, ...] = (64, 256), procs: int = 2) -> dict[str, float]:
    """Every layout's frames/s, measured one after another in this call."""
    return {name: measure(frames) for name, measure in layouts(envs, procs).items()}


def env_only_limit(procs: int = 2, envs: int = 256, seconds: float = 5.0) -> float:
    """``procs`` processes stepping CartPole's ``SyncVectorEnv(envs)`` with random actions, summed."""
    return env_only_fps(partial(gym_vector_env, ENV_ID, envs), procs, seconds)


def report(frames: int, envs: tuple[int, ...] = (64, 256), procs: int = 2) -> tuple[str, float, float]:
    """Measure and print every layout and the limit; returns ``(best layout, its fps, limit fps)``."""
    measured = torchrl_layouts(frames, envs, procs)
    limit = env_only_limit(procs, max(envs))
    best = max(measured, key=measured.get)
    for name, fps in measured.items():
        mark = "  <- best" if name == best else ""
        print(f"  torchrl {name:52s} {fps:10,.0f} frames/s ({fps / limit:5.1%} of the limit){mark}", flush=True)
    print(
        f"  env-only limit: {procs} processes x SyncVectorEnv({max(envs)}), random actions {limit:10,.0f} steps/s",
        flush=True,
    )
    print("  (wall-clock rates; the layouts from their first batch on)", flush=True)
    return best, measured[best], limit


class Yardstick:
    """TorchRL's best collector layout and the env-only limit in this run: :meth:`before` measures
    every layout and the limit, :meth:`after` the best layout again; :attr:`ref` is the higher of
    its two figures, the one every ratio uses (on these shared machines a figure moved by a fifth
    within minutes). ``frames == 0`` skips TorchRL (ratios print as ``TorchRL not measured``)."""

    def __init__(self, frames: int, envs: tuple[int, ...] = (64, 256), procs: int = 2):
        self.frames, self.envs, self.procs = frames, envs, procs
        self.best: Optional[str] = None
        self.figures: list[float] = []  # the best layout's frames/s, before and after
        self.limit = float("nan")

    def before(self) -> None:
        """Every layout and the limit, printed; call before distrl's runs."""
        one_thread()
        if self.frames:
            self.best, first, self.limit = report(self.frames, self.envs, self.procs)
            self.figures = [first]

    def after(self) -> None:
        """The best layout once more, printed; call after distrl's runs."""
        if not self.frames:
            return
        again = layouts(self.envs, self.procs)[self.best](self.frames)
        self.figures.append(again)
        print(
            f"  torchrl {self.best} again, after distrl's runs: {again:,.0f} frames/s (wall, from its first "
            f"batch); the ratios use the higher, {self.ref:,.0f}",
            flush=True,
        )

    @property
    def ref(self) -> float:
        """The best layout's higher figure (frames/s), ``nan`` when TorchRL was not measured."""
        return max(self.figures) if self.figures else float("nan")

    def ratio(self, fps: float, of_limit: bool = True) -> str:
        """``"1.23x TorchRL's best layout, 45.6% of the env-only limit"`` (the limit left out when it
        is not this run's: ``of_limit=False``)."""
        if not self.figures:
            return "TorchRL not measured"
        limit = f", {fps / self.limit:5.1%} of the env-only limit" if of_limit else ""
        return f"{fps / self.ref:.2f}x TorchRL's best layout{limit}"

    def line(self, name: str, summary: dict, of_limit: bool = True, unit: str = "trained frames/s") -> str:
        """One distrl run against TorchRL: its trained fps from the first batch (whole run in brackets)."""
        fps = trained_fps(summary)
        return (
            f"  {name}: {fps:10,.0f} {unit} (wall, from its first batch; {summary['fps']:,.0f} over "
            f"the whole run{dropped(summary)}) = {self.ratio(fps, of_limit)}"
        )
