"""How every benchmark times things, in one place, so that distrl and the alternatives are timed
the same way (design rule 9).

- **One thread.** :func:`one_thread` first, before anything is timed: one torch thread in this
  process, ``OMP_NUM_THREADS=1`` for its children. distrl's runs get one thread a process
  (``run.torch_threads``); TorchRL's collector workers get one (``num_sub_threads``).
- **From the first batch.** TorchRL's layouts are timed from their first batch on (worker start,
  first resets and the first batch left out: ``experiments/baselines.py``); a distrl run is timed
  the same way, by ``summary.json``'s ``fps_running`` (:func:`trained_fps`): frames/s from the
  learner's first batch to its last, counting only the frames it trained on (rows dropped for
  lag, stale gradients: ``frames_dropped``, apart). Both are wall-clock rates.
- **Before and after.** :class:`Yardstick` measures every TorchRL layout and the env-only limit
  before distrl's runs, and the best layout again after them; distrl is held against the higher
  of the two (on these shared machines a figure moved by a fifth within minutes).
- **Clocks named.** :func:`timed` gives a :class:`Rate` by both clocks: wall (``perf_counter``)
  and CPU (``process_time``: this process's threads only, never its children's). Every figure a
  bench prints says which clock it is.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
ENV_ID = "CartPole-v1"


def one_thread() -> None:
    """One torch thread here and one OpenMP thread in every child: call before timing anything."""
    import torch

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


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
    """Median wall time of one ``fn()`` call in ms, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


# ---- distrl runs ------------------------------------------------------------------------------

def train(recipe: str, frames: int, nproc: int = 3, extra: Sequence[str] = (), env: str = ENV_ID,
          run_dir: Optional[Path] = None) -> dict:
    """``torchrun --nproc-per-node=NPROC launch/train.py RECIPE`` (plain ``python`` for one process)
    on ``env`` (a gymnasium id or a TorchRL env factory) for ``frames`` trained frames, one thread a
    process, no evaluation, into ``run_dir`` (a temporary one if not given); returns its ``summary.json``."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(run_dir or tmp)
        launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
                  if nproc > 1 else [sys.executable])
        cmd = [*launch, str(ROOT / "launch" / "train.py"), recipe, "--env", env, "--total-frames", str(frames),
               "--logger", "none", "--run-dir", str(run_dir), "--set", "run.eval_episodes=0", *extra]
        proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        return json.loads((run_dir / "summary.json").read_text())


def trained_fps(summary: dict) -> float:
    """Trained frames per wall-clock second from the learner's first batch to its last
    (``fps_running``): how TorchRL's layouts are timed too."""
    fps = summary.get("fps_running")
    if fps is None:
        raise SystemExit(f"{summary['recipe']} trained on fewer than two batches ({summary['env_frames']} frames): "
                         "give it more frames or time")
    return fps


def dropped(summary: dict) -> str:
    """``", N frames dropped (not counted)"``, or nothing when the learner trained on every frame."""
    n = summary.get("frames_dropped", 0)
    return f", {n:,} frames dropped (not counted)" if n else ""


# ---- TorchRL and the limit ----------------------------------------------------------------------

class Yardstick:
    """TorchRL's best collector layout and the env-only limit in this run (``experiments/baselines.py``):
    :meth:`before` measures every layout and the limit, :meth:`after` the best layout again;
    :attr:`ref` is the higher of its two figures, the one every ratio uses. ``frames == 0`` skips
    TorchRL (ratios print as ``n/a``)."""

    def __init__(self, frames: int, envs: tuple[int, ...] = (64, 256), procs: int = 2):
        self.frames, self.envs, self.procs = frames, envs, procs
        self.best: Optional[str] = None
        self.figures: list[float] = []  # the best layout's frames/s, before and after
        self.limit = float("nan")

    def before(self) -> None:
        from experiments.baselines import report

        one_thread()
        if self.frames:
            self.best, first, self.limit = report(self.frames, self.envs, self.procs)
            self.figures = [first]

    def after(self) -> None:
        from experiments.baselines import layouts

        if not self.frames:
            return
        again = layouts(self.envs, self.procs)[self.best](self.frames)
        self.figures.append(again)
        print(f"  torchrl {self.best} again, after distrl's runs: {again:,.0f} frames/s (wall, from its first "
              f"batch); the ratios use the higher, {self.ref:,.0f}", flush=True)

    @property
    def ref(self) -> float:
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
        return (f"  {name}: {fps:10,.0f} {unit} (wall, from its first batch; {summary['fps']:,.0f} over "
                f"the whole run{dropped(summary)}) = {self.ratio(fps, of_limit)}")
