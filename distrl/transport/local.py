"""The ``local`` backend: every rank of a recipe in one process, calls run on a thread pool.

World size 1 runs the same role classes as a torchrun job, each rank's loop in its own thread
and each call on a shared pool, so the first integration test needs no process group at all.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

from tensordict import TensorDict

from distrl.transport.base import CallTimeoutError, Handler, PeerLostError, RemoteError, Transport, TransportError


class LocalHub:
    """The shared state of one in-process group: a handler table per rank and a thread pool."""

    def __init__(self, world_size: int, num_threads: int = 16):
        self.world_size = world_size
        self.handlers: list[dict[str, Handler]] = [{} for _ in range(world_size)]
        self.pool = ThreadPoolExecutor(num_threads, thread_name_prefix="distrl-local")
        self.closed = [False] * world_size

    def endpoint(self, rank: int, timeout: float = 30.0) -> "LocalTransport":
        """The transport of ``rank`` inside this hub."""
        return LocalTransport(self, rank, timeout)

    def close(self) -> None:
        """Close every rank at once and let the pool's threads end (what closing each endpoint does)."""
        self.closed = [True] * self.world_size
        self.pool.shutdown(wait=True, cancel_futures=True)


class LocalTransport(Transport):
    """One rank's endpoint of a :class:`LocalHub`."""

    def __init__(self, hub: LocalHub, rank: int, timeout: float = 30.0):
        if not 0 <= rank < hub.world_size:
            raise ValueError(f"rank {rank} outside world size {hub.world_size}")
        self.hub, self.rank, self.world_size, self.timeout = hub, rank, hub.world_size, timeout
        self._lost: dict[int, str] = {}

    def serve(self, method: str, handler: Handler) -> None:
        self.hub.handlers[self.rank][method] = handler

    def start(self) -> None:
        pass

    def call(self, dst: int, method: str, td: Optional[TensorDict] = None, timeout: Optional[float] = None) -> Future:
        out: Future = Future()
        if dst in self._lost or self.hub.closed[dst]:
            out.set_exception(PeerLostError(dst, reason=self._lost.get(dst, "closed")))
            return out
        handler = self.hub.handlers[dst].get(method)
        if handler is None:
            out.set_exception(RemoteError(f"rank {dst} serves no method {method!r}"))
            return out

        def run():
            try:
                result = handler(td)
            except Exception as e:  # the remote side's error, named for the caller
                if not out.done():
                    out.set_exception(RemoteError(f"{method} on rank {dst}: {type(e).__name__}: {e}"))
                return
            if not out.done():
                out.set_result(result)

        def expire():
            if out.done():
                return
            try:
                out.set_exception(CallTimeoutError(f"{method} on rank {dst}: no reply in {limit:.1f}s"))
            except Exception:  # lost the race with run(); the reply stands
                pass

        limit = self.timeout if timeout is None else timeout
        timer = threading.Timer(limit, expire)
        timer.daemon = True
        timer.start()
        out.add_done_callback(lambda _: timer.cancel())
        try:
            self.hub.pool.submit(run)
        except RuntimeError as e:  # pool shut down
            out.set_exception(TransportError(str(e)))
        return out

    def lost_peers(self) -> set[int]:
        return set(self._lost)

    def mark_lost(self, rank: int, reason: str = "") -> None:
        self._lost.setdefault(rank, reason)

    def close(self, timeout: float = 10.0, graceful: bool = True) -> None:
        self.hub.closed[self.rank] = True
        if all(self.hub.closed):
            self.hub.pool.shutdown(wait=False, cancel_futures=True)
