"""Sample Factory's doorbells: a rollout worker's "step ``t`` of slot ``s`` is ready" and the
policy worker's "its actions are written", as records of a few bytes through named pipes (FIFOs)
in the run's shared-memory directory.

Why not the transport, as the other signals go: at one request per env group step the rpc path
(TensorPipe's threads, the handler pool, a TensorDict each way) took about a quarter of the
machine at 20k frames/s on 2 cores (``perf``: 60% of the inference rank's CPU, 20% of each
worker's), CPU the envs then lacked. A FIFO record is one ``write`` and one ``read`` syscall.
Sample Factory itself signals through shared-memory queues for the same reason.

Files (made by the learner with the shared memory, unlinked with it once every rank has opened
them): ``req-<inference rank>``, that rank's request pipe, written by each of its rollout workers
(records of 16 bytes: writes of at most ``PIPE_BUF`` bytes are atomic, so writers never interleave);
``rep-<worker rank>``, that worker's reply pipe, written by its inference rank.

Every end is opened read-write and non-blocking: on Linux a FIFO opened so never blocks in
``open`` and never reads end-of-file, so neither side depends on the order the other opens in.
What it does not give, the recipe has already: a dead inference rank ends the job (it is a
critical role), a dead worker's slots are reclaimed by the learner, and every wait is bounded.
"""
from __future__ import annotations

import os
import select
import struct
import time
from pathlib import Path
from typing import Callable, Iterable

REQUEST = struct.Struct("<iiii")  #: worker rank, env group, slot, step
REPLY = struct.Struct("<ii")  #: env group, status
OK, STOP, ERROR = 0, 1, 2  #: reply statuses
_READ = 64 * REQUEST.size  # a multiple of both record sizes: a read never splits a record


def make(directory: str | Path, inference_ranks: Iterable[int], worker_ranks: Iterable[int]) -> None:
    """Create the request pipe of each inference rank and the reply pipe of each worker."""
    for r in inference_ranks:
        os.mkfifo(Path(directory) / f"req-{r}", 0o600)
    for w in worker_ranks:
        os.mkfifo(Path(directory) / f"rep-{w}", 0o600)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_NONBLOCK)


def _poller(fd: int) -> select.poll:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller


def _readable(poller: select.poll, timeout_s: float) -> bool:
    return bool(poller.poll(max(0.0, timeout_s) * 1e3))


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, _READ)
    except BlockingIOError:  # another reader of the same pipe took it (never here: one reader each)
        return b""


class WorkerBell:
    """A rollout worker's ends: ``ask`` for a group's actions, ``wait`` for the reply."""

    def __init__(self, directory: str | Path, server: int, me: int):
        self.me = me
        self._req, self._rep = _open(Path(directory) / f"req-{server}"), _open(Path(directory) / f"rep-{me}")
        self._poller = _poller(self._rep)  # made once: waiting is on the worker's hot path
        self._replies: dict[int, int] = {}  # group -> status, read but not yet waited for

    def ask(self, group: int, slot: int, t: int) -> None:
        os.write(self._req, REQUEST.pack(self.me, group, slot, t))

    def wait(self, group: int, timeout_s: float, stopped: Callable[[], bool], poll_s: float = 0.5) -> int:
        """The status of ``group``'s reply; ``STOP`` if ``stopped()`` turns true first.

        Raises ``TimeoutError`` after ``timeout_s`` without a reply."""
        deadline = time.monotonic() + timeout_s
        while group not in self._replies:
            if stopped():
                return STOP
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply from inference within {timeout_s:.0f}s")
            if _readable(self._poller, min(left, poll_s)):
                for g, status in REPLY.iter_unpack(_read(self._rep)):
                    self._replies[g] = status
        return self._replies.pop(group)

    def close(self) -> None:
        os.close(self._req)
        os.close(self._rep)


class InferenceBell:
    """An inference rank's ends: the requests of its workers, and a reply pipe per worker."""

    def __init__(self, directory: str | Path, me: int, workers: Iterable[int]):
        self._req = _open(Path(directory) / f"req-{me}")
        self._poller = _poller(self._req)
        self._rep = {w: _open(Path(directory) / f"rep-{w}") for w in workers}

    def requests(self, timeout_s: float) -> list[tuple[int, int, int, int]]:
        """``(rank, group, slot, t)`` of each request that arrived; waits up to ``timeout_s`` for one."""
        if not _readable(self._poller, timeout_s):
            return []
        return list(REQUEST.iter_unpack(_read(self._req)))

    def answer(self, rank: int, group: int, status: int = OK) -> None:
        try:
            os.write(self._rep[rank], REPLY.pack(group, status))
        except (BlockingIOError, BrokenPipeError, KeyError):  # a dead worker's full pipe, or no such worker
            pass

    def close(self) -> None:
        for fd in (self._req, *self._rep.values()):
            os.close(fd)
