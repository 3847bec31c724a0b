"""Atomic checkpoints in a run directory.

A checkpoint is written to a temporary file, flushed and fsynced, then renamed into place
(``os.replace`` is atomic on POSIX), so a crash at any moment leaves either the previous valid
checkpoint or the new one, never half a file. The two newest are kept; loading falls back to
the older one if the newest cannot be read. ``best.pt`` beside them holds the policy that scored
best in a greedy evaluation; ``--resume`` always continues from the newest, never from the best.
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

_NAME = re.compile(r"^ckpt_(\d{10})\.pt$")


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def save_checkpoint(run_dir: str | Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` as checkpoint ``step`` atomically; prune all but the ``keep`` newest."""
    final = _write_atomic(checkpoint_dir(run_dir) / f"ckpt_{step:010d}.pt", state)
    for old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def save_best(run_dir: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` as ``checkpoints/best.pt`` atomically (the best-evaluated policy so far)."""
    return _write_atomic(best_checkpoint_path(run_dir), state)


def best_checkpoint_path(run_dir: str | Path) -> Path:
    return checkpoint_dir(run_dir) / "best.pt"


def _write_atomic(final: Path, state: dict[str, Any]) -> Path:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    if "crash_before_rename" in os.environ.get("DISTRL_FAULT", ""):  # fault injection: distrl/faults.py
        os._exit(17)
    os.replace(tmp, final)
    return final


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary files are ignored)."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name))


def load_latest_checkpoint(run_dir: str | Path) -> Optional[dict[str, Any]]:
    """The newest checkpoint that loads, or ``None`` when there is none."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception:  # a damaged file: fall back to the previous one
            continue
    return None


def rng_state() -> dict[str, Any]:
    """The state of every random generator a run draws from (torch, numpy, python), for a checkpoint."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` saved: a resumed run draws what the uninterrupted one would."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
