"""The identity of one launch, the same on every rank and new for every job.

torchrun's ``TORCHELASTIC_RUN_ID`` is not that: without ``--standalone`` or ``--rdzv-id`` it is
the string ``none`` for every job, and a user who repeats ``--rdzv-id`` repeats it. So rank 0
makes a name (UTC time plus a random suffix) and publishes it in torchrun's store, where the
other ranks, on any node, read it. The store outlives a ``--max-restarts`` restart, so a
restarted group gets the same name and continues the same run directory.

A launch also owns its run directory: :func:`claim_run_dir` makes it owner-only (``0o700``) and
takes ``RUN_DIR/.lock`` (``fcntl.flock``) for as long as the launch runs, so a second launch on the
same directory, ``--resume`` or not, stops in one line naming the holder's pid and host. The kernel
drops a dead holder's lock, so a crash or a SIGKILL leaves nothing to clean up.

A run directory another user owns is refused in one line (its owner could swap its files under
the run), and the files a launch writes there by name (the lock, ``job_id``, ``config.json``,
``roles.json``: :func:`write_private`; ``summary.json``, ``metrics.jsonl`` and the CSV files,
``wandb_id``, ``curves.png``: :func:`open_private`) are opened with ``O_NOFOLLOW``: a symlink planted
in their place is refused, not written through. A directory the run writes in (``checkpoints/``,
``csv/``) may be a link: moving checkpoints to a larger disk is the user's choice.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Iterator

STORE_KEY = "distrl/job_id"


def _new_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def job_id(timeout_s: float = 120.0) -> str:
    """This job's id: new in a plain process (call it once per launch), made by rank 0 and read by
    the others under torchrun.

    ``ValueError`` (one line) if a rank waits ``timeout_s`` for rank 0's id."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not (addr and port and "TORCHELASTIC_RUN_ID" in os.environ):
        return _new_id()  # one process, or a launcher without torchrun's store: nobody to agree with
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment: no store to read before the
        # group forms (rank 0 hosts one later), so torchrun's run id is all the ranks share
        return os.environ["TORCHELASTIC_RUN_ID"]
    import torch.distributed as dist

    store = dist.TCPStore(addr, int(port), None, False, timedelta(seconds=timeout_s))
    if int(os.environ.get("RANK", 0)) == 0:
        # compare_set keeps an id already there: the one this job made before a restart
        return store.compare_set(STORE_KEY, "", _new_id()).decode()
    try:
        return store.get(STORE_KEY).decode()
    except RuntimeError as e:  # a timeout (DistStoreError is a RuntimeError)
        raise ValueError(f"rank {os.environ.get('RANK')}: no job id from rank 0 within {timeout_s:g}s ({e})") from None


LOCK_NAME = ".lock"  #: in the run directory: ``pid host start`` of the launch that holds it
#: the files a launch writes into its run directory by name: none may be a symlink
NAMED_FILES = (
    LOCK_NAME,
    "job_id",
    "config.json",
    "roles.json",
    "summary.json",
    "metrics.jsonl",
    "metrics.rewound.jsonl",
    "wandb_id",
    "curves.png",
)


def _check_owner(run_dir: Path) -> None:
    """One line (``ValueError``) if ``run_dir`` exists and another user owns it, or if one of
    :data:`NAMED_FILES` in it is a symlink."""
    try:
        owner = run_dir.stat().st_uid
    except FileNotFoundError:
        return
    if owner != os.getuid():
        raise ValueError(
            f"{run_dir} belongs to another user (uid {owner}, you are {os.getuid()}): a run directory must be "
            "your own; choose another --run-dir"
        )
    links = [name for name in NAMED_FILES if (run_dir / name).is_symlink()]
    if links:
        raise ValueError(
            f"{run_dir}: {', '.join(links)} is a symlink, which a run does not write through; "
            "remove it or choose another --run-dir"
        )


def open_private(path: str | Path, mode: str = "w", **kw):
    """``open(path, mode, **kw)`` for writing (``"w"``, ``"a"``, ``"a+"``, ``"wb"``...), the file made
    ``0o600`` if new, without following a symlink at ``path`` (``OSError`` ELOOP instead)."""
    flags = os.O_CREAT | os.O_NOFOLLOW | (os.O_RDWR if "+" in mode else os.O_WRONLY)
    flags |= os.O_APPEND if "a" in mode else os.O_TRUNC
    return os.fdopen(os.open(path, flags, 0o600), mode, **kw)


def write_private(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode ``0o600`` if new) without following a symlink at ``path``
    (``OSError`` ELOOP instead)."""
    with open_private(path, "w") as f:
        f.write(text)


class RunDirBusy(ValueError):
    """Another live launch holds the run directory's lock."""


def _busy(run_dir: Path, lock: Path) -> RunDirBusy:
    try:
        pid, host, since = lock.read_text().split()[:3]
        who = f"pid {pid} on host {host} (since {since})"
    except (OSError, ValueError):  # the holder took the lock and has not written its line yet
        who = "another launch"
    return RunDirBusy(
        f"{run_dir} is in use by {who}: wait for that run to end (or stop it), or choose another --run-dir"
    )


def ensure_run_dir_free(run_dir: str | Path) -> None:
    """Raise :class:`RunDirBusy` (one line) if a live launch holds ``run_dir``; creates and writes
    nothing (``distrl train --nproc`` checks here before it starts the ranks, rank 0 of which then
    takes the lock)."""
    _check_owner(Path(run_dir))
    lock = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError as e:  # another user's run directory: not ours to take either
        raise RunDirBusy(
            f"{run_dir}: cannot read its lock file {lock.name} ({e.strerror}); choose another --run-dir"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(Path(run_dir), lock) from None
    finally:
        os.close(fd)  # closing drops the probe's own lock


@contextlib.contextmanager
def claim_run_dir(run_dir: str | Path, wait_s: float = 0.0) -> Iterator[Path]:
    """Hold ``run_dir`` for this launch: create it owner-only (``0o700``; an existing one of ours is
    made so), take ``RUN_DIR/.lock`` and write ``pid host start`` into it. :class:`RunDirBusy` (one
    line naming the holder) if another live process holds it after ``wait_s`` seconds (a restarted
    rank 0 waits for its predecessor's last child to go); ``ValueError`` (one line) for another user's
    directory or a symlink among :data:`NAMED_FILES`. Released on exit from the block, or by the
    kernel when the process dies."""
    run_dir = Path(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    _check_owner(run_dir)
    with contextlib.suppress(FileExistsError):
        run_dir.mkdir(mode=0o700)  # the umask can only take bits away from 0o700
    os.chmod(run_dir, 0o700)  # a directory made before distrl did this, or by hand
    lock = run_dir / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as e:  # a symlink put there since the check above
        raise ValueError(f"{run_dir}: cannot open its lock file {lock.name} ({e.strerror}); choose another --run-dir")
    try:
        os.fchmod(fd, 0o600)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise _busy(run_dir, lock) from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()} {since}\n".encode(), 0)
        yield run_dir
    finally:
        os.close(fd)  # releases the lock (a forked child that still has it open holds it on)
