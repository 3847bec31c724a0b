"""How every benchmark times things, in one place, so that distrl and the alternatives are timed
the same way (design rule 9); the ideal's arithmetic (design rule 11) beside it.

- **One thread.** :func:`one_thread` first, before anything is timed: one torch thread in this
  process, ``OMP_NUM_THREADS=1`` for its children. distrl's runs get one thread a process
  (``run.torch_threads``); TorchRL's collector workers get one (``num_sub_threads``).
- **From the first batch.** TorchRL's layouts are timed from their first batch on (worker start,
  first resets and the first batch left out: :func:`experiments.kit.torchrl_layouts.first_batch_fps`);
  a distrl run is timed the same way, by ``summary.json``'s ``fps_running``
  (:func:`experiments.kit.runs.trained_fps`). Both are wall-clock rates.
- **Before and after.** :class:`experiments.kit.yardstick.Yardstick` measures every TorchRL layout
  and the env-only limit before distrl's runs, and the best layout again after them; distrl is
  held against the higher of the two (on these shared machines a figure moved by a fifth within
  minutes).
- **Clocks named.** :func:`timed` gives a :class:`Rate` by both clocks: wall (``perf_counter``)
  and CPU (``process_time``: this process's threads only, never its children's). Every figure a
  bench prints says which clock it is.
- **Windows, round robin.** In-process rows that are compared with each other are timed by
  :class:`Meter` in short windows taken in turn, so that a burst of load from other jobs hits every
  row alike; each row reports its least disturbed window.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import torch


def one_thread() -> None:
    """One torch thread here and one OpenMP thread in every child: call before timing anything."""
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0))


# ---- in-process rates -------------------------------------------------------------------------


@dataclass
class Rate:
    """``frames`` done in ``wall_s`` seconds of wall time and ``cpu_s`` of this process's CPU."""

    frames: int
    wall_s: float
    cpu_s: float

    @property
    def wall(self) -> float:
        """Frames per wall-clock second."""
        return self.frames / max(self.wall_s, 1e-12)

    @property
    def cpu(self) -> float:
        """Frames per CPU-second of this process (higher than :attr:`wall` when others take the core)."""
        return self.frames / max(self.cpu_s, 1e-12)

    def us_per_frame(self, clock: str) -> float:
        """Microseconds of ``clock`` (``"wall"`` or ``"cpu"``) per frame."""
        return 1e6 * (self.wall_s if clock == "wall" else self.cpu_s) / max(self.frames, 1)


def timed(step: Callable[[], int], seconds: float = math.inf, warmup: int = 1, frames: Optional[int] = None) -> Rate:
    """``step()`` (which returns the frames it did) ``warmup`` times untimed, then again until
    ``seconds`` of wall time have passed or ``frames`` frames are done: the timed calls'
    :class:`Rate` by both clocks."""
    for _ in range(warmup):
        step()
    done, w0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - w0 < seconds and (frames is None or done < frames):
        done += step()
    return Rate(done, time.perf_counter() - w0, time.process_time() - c0)


def median_wall_ms(fn: Callable[[], object], repeats: int, warmup: int = 10) -> float:
    """Median wall time of one ``fn()`` call in ms, after ``warmup`` untimed calls (a median, so a
    burst of load from other jobs moves it less than a mean)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


class Meter:
    """Something that steps: ``step()`` does ``frames`` env-steps (or samples), with ``threads``
    torch threads. Measured in short windows, round robin with the other meters (:func:`round_robin`),
    so a burst of load from other jobs hits every row alike."""

    def __init__(
        self,
        name: str,
        step: Callable[[], object],
        frames: int,
        close: Callable[[], None] = lambda: None,
        threads: int = 1,
    ):
        self.name, self.step, self.frames, self.close, self.threads = name, step, frames, close, threads
        self.windows: list[Rate] = []

    def _counted(self) -> int:
        self.step()
        return self.frames

    def window(self, seconds: float, warmup: int = 0) -> None:
        """One window of ``seconds`` after ``warmup`` steps left out; ``seconds == 0``: warm-up only."""
        torch.set_num_threads(self.threads)
        try:
            rate = timed(self._counted, seconds, warmup)
        finally:
            torch.set_num_threads(1)
        if seconds:
            self.windows.append(rate)

    @property
    def best(self) -> tuple[float, float]:
        """The least disturbed window: highest wall rate, highest CPU rate."""
        return max(w.wall for w in self.windows), max(w.cpu for w in self.windows)


def round_robin(
    meters: Iterable[Meter], rounds: int, seconds: float, warmup: int = 2
) -> dict[str, tuple[float, float]]:
    """Every meter warmed up (``warmup`` steps: allocations, first resets, compilation), then
    ``rounds`` windows of ``seconds`` each, taken in turn; then closed. ``{name: (best wall, best CPU)}``."""
    meters = list(meters)
    for m in meters:
        m.window(0.0, warmup=warmup)
    for _ in range(rounds):
        for m in meters:
            m.window(seconds)
    for m in meters:
        m.close()
    return {m.name: m.best for m in meters}


# ---- the ideal (design rule 11) -----------------------------------------------------------------


def ideal_fps(us: dict[str, float], n_cores: int) -> float:
    """Steps/s if ``n_cores`` did nothing but each stage's work: cores / (sum of us per step)."""
    return n_cores * 1e6 / sum(us.values())


def cheapest(*timings: dict[str, dict]) -> dict[str, dict]:
    """Each stage's cheapest timing (by CPU us, ``{"cpu_us": ...}``) among several timings of the
    same stages: on a shared VM a stage timed once for a few seconds drifts 10-40% (1,047-1,465 ideal
    agent steps/s on one day), so the stages are timed more than once and the fastest kept, the
    harsher ideal."""
    return {k: min((t[k] for t in timings), key=lambda c: c["cpu_us"]) for k in timings[0]}


def around(before: dict[str, dict], after: dict[str, dict]) -> dict[str, float]:
    """Each stage's mean CPU us of the timings just before and just after one run: the machine's
    speed while it ran, on a VM whose speed drifts 10-40% over a benchmark's minutes."""
    return {k: (before[k]["cpu_us"] + after[k]["cpu_us"]) / 2 for k in before}


def fmt_ratio(x: Optional[float]) -> str:
    """``"1.23x"``, or ``"n/a"`` when the reference was not measured."""
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.2f}x"
