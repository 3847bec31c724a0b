"""Shared-memory TensorDicts that every process on one node opens by path, and that no run leaves
behind.

A TensorDict is memory-mapped into files under ``/dev/shm`` (tensordict's ``memmap_`` /
``load_memmap``: every process maps the same pages, so a write in one is a read in the others,
with no copy and no pipe). The files only need to exist until every process has mapped them:
:func:`unlink` removes them then, and the mappings live on until each process exits. So a run
that ends, crashes or is killed leaves nothing, except in the window before every process has
mapped the files; for that window the directory is named after its owner's pid
(``/dev/shm/distrl-<tag>-<pid>-<random>``) and :func:`remove_owned_by` (called by the rank's
supervisor when its child dies) and :func:`sweep_stale` (called before creating a new one) remove
directories whose owner is gone.

The directory is created owner-only (``0o700``) before anything is written into it, and its files
are made ``0o600``, whatever the umask: ``/dev/shm`` is shared by every user of the machine, and
what is in the files (observations, actions, a run's doorbell pipes) is the run's alone.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

import torch
from tensordict import TensorDict

SHM_ROOT = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
_NAME = re.compile(r"^distrl-[a-z0-9]+-(\d+)-[0-9a-f]+$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def sweep_stale(root: Path = SHM_ROOT) -> list[Path]:
    """Remove every ``distrl-*`` directory under ``root`` whose owner process is dead."""
    removed = []
    for path in root.glob("distrl-*"):
        m = _NAME.match(path.name)
        if m and not _alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def remove_owned_by(pid: int, root: Path = SHM_ROOT) -> None:
    """Remove the ``distrl-*`` directories created by process ``pid`` (after it died)."""
    for path in root.glob(f"distrl-*-{pid}-*"):
        if _NAME.match(path.name):
            shutil.rmtree(path, ignore_errors=True)


def create(td: TensorDict, tag: str, root: Path = SHM_ROOT) -> tuple[TensorDict, Path]:
    """Memory-map ``td`` (zeros or initial values) into a fresh directory; returns the mapped
    TensorDict (plain tensor views of the shared pages) and the path other processes open."""
    sweep_stale(root)
    path = root / f"distrl-{tag}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.mkdir(path, 0o700)  # fails if the name exists: never write into a directory someone else made
    td.memmap_(prefix=str(path))
    _owner_only(path)
    return _plain(td), path


def _owner_only(path: Path) -> None:
    """``0o700`` for ``path`` and the directories under it, ``0o600`` for its files (tensordict
    creates them with the umask's permissions; the directory already kept others out)."""
    for folder, _, files in os.walk(path):
        os.chmod(folder, 0o700)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o600)


def attach(path: str | Path) -> TensorDict:
    """Map the TensorDict another process created at ``path`` (read-write)."""
    return _plain(TensorDict.load_memmap(str(path), mode="r+"))


def unlink(path: str | Path) -> None:
    """Remove the files; mappings already made stay valid until their processes exit."""
    shutil.rmtree(path, ignore_errors=True)


def _plain(td: TensorDict) -> TensorDict:
    # MemoryMappedTensor is a tensor subclass whose every indexing goes through Python
    # (__torch_function__); a plain view of the same storage indexes at native speed.
    return td.apply(lambda t: t.as_subclass(torch.Tensor))


def encode_path(path: str | Path) -> torch.Tensor:
    """A path as a ``[L]`` uint8 tensor, to ride in a TensorDict message."""
    return torch.tensor(list(str(path).encode()), dtype=torch.uint8)


def decode_path(t: torch.Tensor) -> str:
    return bytes(t.tolist()).decode()
