"""Sample Factory's doorbells: a rollout worker's "step ``t`` of slot ``s`` is ready" and the
policy worker's "its actions are written", a worker's "slot ``s`` is full" and the learner's "your
next spare is slot ``s``", as records of a few bytes through named pipes (FIFOs) in the run's
shared-memory directory.

Why not the transport, as the other signals go: at one request per env group step the rpc path
(TensorPipe's threads, the handler pool, a TensorDict each way) took about a quarter of the
machine at 20k frames/s on 2 cores (``perf``: 60% of the inference rank's CPU, 20% of each
worker's), CPU the envs then lacked. A FIFO record is one ``write`` and one ``read`` syscall.
Sample Factory itself signals through shared-memory queues for the same reason.

Two channels, each a request pipe per server and a reply pipe per worker (made by the learner
with the shared memory, unlinked with it once every rank has opened them; records of 16 and 8
bytes: writes of at most ``PIPE_BUF`` bytes are atomic, so writers never interleave):

- ``ACT``: ``req-<inference rank>`` carries (worker rank, group, slot, step): "step ``t`` of the
  slot is ready"; ``rep-<worker rank>`` carries (group, status): "its actions are written".
- ``SLOT``: ``hand-<learner rank>`` carries (worker rank, group, slot, steps): "this slot is full,
  it is yours"; ``spare-<worker rank>`` carries (group, slot): "your group's next spare slot". The
  episode returns travel in the slot itself (``("next", "episode_return")``). Before 2026-12-02
  the hand-in was an rpc with the returns in a TensorDict: once per 4096-frame slot, yet about
  0.75 us a frame across the learner and the workers (TensorPipe's threads, the handler's
  (de)serialisation); through the pipe sf went 6-12% faster (docs/sf.md).

Every end is opened read-write and non-blocking: on Linux a FIFO opened so never blocks in
``open`` and never reads end-of-file, so neither side depends on the order the other opens in.
What it does not give, the recipe has already: a dead inference rank ends the job (it is a
critical role), a dead worker's slots are reclaimed by the learner, and every wait is bounded.
"""

from __future__ import annotations

import collections
import os
import select
import struct
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

REQUEST = struct.Struct("<iiii")  #: worker rank, env group, slot, step
REPLY = struct.Struct("<ii")  #: env group, status (ACT) or slot (SLOT)
OK, STOP, ERROR = 0, 1, 2  #: ACT reply statuses
_READ = 64 * REQUEST.size  # a multiple of both record sizes: a read never splits a record
ACT, SLOT = ("req", "rep"), ("hand", "spare")  #: channels: (request pipe, reply pipe) name prefixes


def make(directory: str | Path, learner: int, inference_ranks: Iterable[int], worker_ranks: Iterable[int]) -> None:
    """Create the request pipes of the learner (SLOT) and of each inference rank (ACT), and each
    worker's reply pipes of both channels."""
    names = [f"{SLOT[0]}-{learner}"] + [f"{ACT[0]}-{r}" for r in inference_ranks]
    names += [f"{c[1]}-{w}" for w in worker_ranks for c in (ACT, SLOT)]
    for name in names:
        os.mkfifo(Path(directory) / name, 0o600)


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
    """A rollout worker's ends of one channel: ``ask`` for a group, ``wait`` for its reply."""

    def __init__(self, directory: str | Path, server: int, me: int, channel: tuple[str, str] = ACT):
        self.me = me
        self._req = _open(Path(directory) / f"{channel[0]}-{server}")
        self._rep = _open(Path(directory) / f"{channel[1]}-{me}")
        self._poller = _poller(self._rep)  # made once: waiting is on the worker's hot path
        # group -> its replies read but not yet waited for, oldest first: a SLOT reply is read one
        # hand-in later, so the next one can already be in the pipe behind it
        self._replies: dict[int, collections.deque[int]] = collections.defaultdict(collections.deque)

    def ask(self, group: int, slot: int, t: int) -> None:
        os.write(self._req, REQUEST.pack(self.me, group, slot, t))

    def wait(self, group: int, timeout_s: float, stopped: Callable[[], bool], poll_s: float = 0.5) -> Optional[int]:
        """``group``'s reply (a status, or a slot); ``None`` if ``stopped()`` turns true first.

        Raises ``TimeoutError`` after ``timeout_s`` without a reply."""
        deadline = time.monotonic() + timeout_s
        while not self._replies[group]:
            if stopped():
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply from inference within {timeout_s:.0f}s")
            if _readable(self._poller, min(left, poll_s)):
                for g, status in REPLY.iter_unpack(_read(self._rep)):
                    self._replies[g].append(status)
        return self._replies[group].popleft()

    def close(self) -> None:
        os.close(self._req)
        os.close(self._rep)


class ServerBell:
    """A server's ends of one channel (an inference rank's ACT, the learner's SLOT): the requests
    of its workers, and a reply pipe per worker."""

    def __init__(self, directory: str | Path, me: int, workers: Iterable[int], channel: tuple[str, str] = ACT):
        self._req = _open(Path(directory) / f"{channel[0]}-{me}")
        self._poller = _poller(self._req)
        self._rep = {w: _open(Path(directory) / f"{channel[1]}-{w}") for w in workers}

    def requests(self, timeout_s: float) -> list[tuple[int, int, int, int]]:
        """``(rank, group, slot, t)`` of each request that arrived; waits up to ``timeout_s`` for one."""
        if not _readable(self._poller, timeout_s):
            return []
        return list(REQUEST.iter_unpack(_read(self._req)))

    def answer(self, rank: int, group: int, status: int = OK) -> None:
        """Reply ``status`` (or a slot) to ``rank``'s ``group``."""
        try:
            os.write(self._rep[rank], REPLY.pack(group, status))
        except (BlockingIOError, BrokenPipeError, KeyError):  # a dead worker's full pipe, or no such worker
            pass

    def close(self) -> None:
        for fd in (self._req, *self._rep.values()):
            os.close(fd)
