"""distrl runs as the benchmarks start and read them: one command line (:func:`train`), one rate
(:func:`trained_fps`, the learner's ``fps_running``: wall clock from its first batch to its last,
as TorchRL's layouts are timed from their first batch), and the lines every bench prints from a
``summary.json`` (frames dropped, where each role's time went).

A run is a child process (``torchrun`` or plain ``python``) with one thread a process and no
evaluation, so that what is timed is collection and training alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]  #: the checkout: launch/train.py and the runs/ folder are under it
ENV_ID = "CartPole-v1"  #: the env of the CartPole benchmarks and of TorchRL's yardstick


def train(
    recipe: str,
    frames: int,
    nproc: int = 3,
    extra: Sequence[str] = (),
    env: str = ENV_ID,
    run_dir: Optional[Path] = None,
) -> dict:
    """``torchrun --nproc-per-node=NPROC launch/train.py RECIPE`` (plain ``python`` for one process)
    on ``env`` (a gymnasium id or a TorchRL env factory) for ``frames`` trained frames, one thread a
    process, no evaluation, into ``run_dir`` (a temporary one if not given); returns its ``summary.json``."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(run_dir or tmp)
        launch = (
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
            if nproc > 1
            else [sys.executable]
        )
        cmd = [
            *launch,
            str(ROOT / "launch" / "train.py"),
            recipe,
            "--env",
            env,
            "--total-frames",
            str(frames),
            "--logger",
            "none",
            "--run-dir",
            str(run_dir),
            "--set",
            "run.eval_episodes=0",
            *extra,
        ]
        proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        return json.loads((run_dir / "summary.json").read_text())


def trained_fps(summary: dict) -> float:
    """Trained frames per wall-clock second from the learner's first batch to its last
    (``fps_running``): how TorchRL's layouts are timed too. Frames the learner dropped (lag, stale
    gradients: ``frames_dropped``) are not in it."""
    fps = summary.get("fps_running")
    if fps is None:
        raise SystemExit(
            f"{summary['recipe']} trained on fewer than two batches ({summary['env_frames']} frames): "
            "give it more frames or time"
        )
    return fps


def dropped(summary: dict) -> str:
    """``", N frames dropped (not counted)"``, or nothing when the learner trained on every frame."""
    n = summary.get("frames_dropped", 0)
    return f", {n:,} frames dropped (not counted)" if n else ""


def budget_lines(summary: dict) -> list[str]:
    """``role: phase share, ...`` of a summary's time budget, largest share first: where each
    role's time went (design rule 9 asks every bench to say)."""
    out = []
    for role, phases in summary.get("time_budget", {}).items():
        shares = ", ".join(f"{k} {v:.0%}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1]))
        out.append(f"    {role:15s} {shares}")
    return out
