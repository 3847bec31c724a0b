"""Atomic checkpoints in a run directory.

A checkpoint is written to a temporary file, flushed and fsynced, then renamed into place
(``os.replace`` is atomic on POSIX), so a crash at any moment leaves either the previous valid
checkpoint or the new one, never half a file. A write that fails (a full disk) removes its
temporary file and raises (the learner then stops in one line: ``LearnerSession.checkpoint``); the
temporary files a crash leaves are removed by the next successful checkpoint and by
:func:`resume_checkpoint`. The temporary file is opened with ``O_NOFOLLOW``: a symlink in its place
is refused, not written through.

Checkpoints are ``ckpt_<step>.pt`` (the learner's update count) and are ordered by that number,
never by file name. Pruning keeps the checkpoint just written, always, and the ``keep - 1``
highest-numbered ones below it. One numbered above it belongs to a history the run has left (it
resumed from an older checkpoint because the newer ones were damaged, or started over in a run
directory that held checkpoints): it is removed, since ``--resume`` would otherwise continue from
it instead of from the run going on.

Loading falls back to the next older checkpoint when the newest cannot be read. When checkpoint
files exist and none of them loads, :func:`resume_checkpoint` raises :class:`DamagedCheckpoints`
(``run.allow_fresh`` starts over instead) rather than let ``--resume`` silently start over.
``best.pt`` beside them holds the policy that scored best in a greedy evaluation; ``--resume``
always continues from the newest, never from the best.

Checkpoints are the run's user's alone (``checkpoints/`` ``0o700``, files ``0o600``, whatever the
umask) and are read with ``torch.load(weights_only=True)`` (:func:`load_checkpoint`): what they
hold is tensors, numbers, strings and containers of them, and numpy's RNG state, whose three numpy
types are allowed by name. A file that names anything else (a pickled object: code would run to
build it) is refused like a damaged one instead of being executed.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

try:
    from numpy._core.multiarray import _reconstruct
except ImportError:  # numpy 1
    from numpy.core.multiarray import _reconstruct

_NAME = re.compile(r"^ckpt_(\d+)\.pt$")
#: what a checkpoint may name besides torch's own weights-only types: numpy's RNG state (a uint32
#: array), under the names numpy 2 and numpy 1 pickle it with
_NUMPY_RNG_GLOBALS = [
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
    (_reconstruct, "numpy._core.multiarray._reconstruct"),
    (_reconstruct, "numpy.core.multiarray._reconstruct"),
]


class DamagedCheckpoints(ValueError):
    """``--resume`` found checkpoint files in a run directory and none of them loads."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def _step_of(path: Path) -> int:
    """The step a checkpoint file is named for: ``ckpt_<step>.pt``."""
    return int(_NAME.match(path.name).group(1))


def save_checkpoint(run_dir: str | Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` as checkpoint ``step`` atomically, then prune: it and the ``keep - 1``
    highest-numbered checkpoints below it stay; the other checkpoints, and the temporary files of
    earlier writes that never finished, are removed."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1 (the checkpoint just written), got {keep}")
    final = _write_atomic(checkpoint_dir(run_dir) / f"ckpt_{step:010d}.pt", state)
    found = list_checkpoints(run_dir)
    below = [p for p in found if _step_of(p) < step]
    kept = {final, *below[max(0, len(below) - (keep - 1)) :]}
    for path in found:
        if path not in kept:
            path.unlink(missing_ok=True)
    _remove_temp_files(final.parent, ".ckpt_*.pt.tmp")
    return final


def save_best(run_dir: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` as ``checkpoints/best.pt`` atomically (the best-evaluated policy so far)."""
    return _write_atomic(best_checkpoint_path(run_dir), state)


def best_checkpoint_path(run_dir: str | Path) -> Path:
    return checkpoint_dir(run_dir) / "best.pt"


def failed_write_line(run_dir: str | Path, what: str, updates: int, error: OSError) -> str:
    """The learner's one line for a checkpoint (or ``best.pt``) not written, naming the newest kept."""
    saved = list_checkpoints(run_dir)
    return (
        f"[learner] {what} at update {updates} not written ({' '.join(str(error).split())}); "
        f"stopping: the newest checkpoint is {saved[-1].name if saved else 'none'}"
    )


def _owner_only_dir(folder: Path) -> None:
    """Create ``folder`` (and its parents) if needed and make it ``0o700``, whatever the umask."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid == os.getuid():
        os.chmod(folder, 0o700)


def _write_atomic(final: Path, state: dict[str, Any]) -> Path:
    _owner_only_dir(final.parent)
    tmp = final.parent / f".{final.name}.tmp"
    try:
        # O_NOFOLLOW: a symlink planted as the temp file is refused (ELOOP), not written through
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)  # a leftover temp file keeps its old mode through O_CREAT
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        if "crash_before_rename" in os.environ.get("DISTRL_FAULT", ""):  # fault injection: distrl/runtime/faults.py
            os._exit(17)
        os.replace(tmp, final)
    except BaseException:  # a full disk, a state that cannot be pickled, an interrupt: no temp file stays
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return final


def _remove_temp_files(folder: Path, pattern: str) -> None:
    """Remove the temporary files matching ``pattern`` that writes which never finished left in ``folder``."""
    if folder.is_dir():
        for tmp in folder.glob(pattern):
            tmp.unlink(missing_ok=True)


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest (lowest step) first; temporary files are ignored."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _NAME.match(p.name)), key=lambda p: (_step_of(p), p.name))


def _newest_loadable(run_dir: str | Path) -> tuple[Optional[dict[str, Any]], list[str]]:
    """The newest checkpoint that loads (``None`` if none does), and why each newer one did not."""
    failures = []
    for path in reversed(list_checkpoints(run_dir)):
        try:
            return load_checkpoint(path), failures
        except Exception as e:  # a damaged file (or one naming code to run): fall back to the previous one
            failures.append(f"{path.name}: {type(e).__name__}")
    return None, failures


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """One checkpoint file, on the CPU, read weights-only: a file that names any global beyond
    torch's weights-only set and numpy's RNG state raises ``pickle.UnpicklingError`` instead of
    running code."""
    with torch.serialization.safe_globals(_NUMPY_RNG_GLOBALS):
        return torch.load(path, map_location="cpu", weights_only=True)


def load_latest_checkpoint(run_dir: str | Path) -> Optional[dict[str, Any]]:
    """The newest checkpoint that loads, or ``None`` when there is none or none loads. It only
    reads (a policy export may run beside training); ``--resume`` uses :func:`resume_checkpoint`."""
    return _newest_loadable(run_dir)[0]


def resume_checkpoint(run_dir: str | Path, allow_fresh: bool = False) -> Optional[dict[str, Any]]:
    """What ``--resume`` continues from: the newest checkpoint that loads, or ``None`` when the
    run wrote none. The temporary files of writes that never finished are removed first (the
    resuming learner is the directory's one writer).

    Checkpoint files of which none loads raise :class:`DamagedCheckpoints`, in one line naming the
    folder, how many there are and how to start over anyway; with ``allow_fresh``, ``None``."""
    folder = checkpoint_dir(run_dir)
    _remove_temp_files(folder, ".*.tmp")
    state, failures = _newest_loadable(run_dir)
    if state is None and failures and not allow_fresh:
        raise DamagedCheckpoints(
            f"--resume: none of the {len(failures)} checkpoint files in {folder} loads (newest: {failures[0]}); "
            "set run.allow_fresh=true (--set run.allow_fresh=true) to start the run over anyway"
        )
    return state


def run_state(
    model: torch.nn.Module,
    optim: torch.optim.Optimizer,
    tracker: dict,
    config: dict,
    fields: dict,
    roles: Optional[dict] = None,
    extra: Optional[dict] = None,
) -> dict[str, Any]:
    """What a learner's checkpoint holds: model, optimizer, the run's counters (``tracker``), every RNG
    state, the config, ``fields`` (W&B id, action encoding, policy network), the roles' state
    under ``"extra"`` (an Ape-X replay) when given, and ``extra`` on top."""
    state = {"model": model.state_dict(), "optim": optim.state_dict(), "tracker": tracker, "rng": rng_state()}
    state |= {"config": config, **fields}
    if roles is not None:
        state["extra"] = roles
    return state | (extra or {})


def rng_state() -> dict[str, Any]:
    """The state of every random generator a run draws from (torch, numpy, python), for a checkpoint."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` saved: a resumed run draws what the uninterrupted one would."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def rescale_lr(optim: torch.optim.Optimizer, saved_lr: Optional[float], new_lr: Optional[float]) -> bool:
    """After ``optim``'s state was loaded from a run at ``saved_lr``: every group's rate and its
    schedule's start (``initial_lr``, :func:`distrl.roles.learner.set_lr`) scaled by new / old, so a
    new ``algo.lr`` is applied and the schedule's clock (the budget done) goes on where it was.
    Returns whether anything changed (``False`` when either is unknown or they are equal)."""
    if saved_lr is None or new_lr is None or not saved_lr > 0 or float(saved_lr) == float(new_lr):
        return False
    ratio = float(new_lr) / float(saved_lr)
    for group in optim.param_groups:
        group["lr"] *= ratio
        if "initial_lr" in group:
            group["initial_lr"] *= ratio
    return True
