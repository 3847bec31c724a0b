"""The learner's view of the other ranks: pings, the ranks declared lost, and the rule that stops a
run once every rank that makes its experience is gone.

A failed or unanswered ping declares a rank lost, in one log line and in ``summary.json``'s
``lost_ranks``; the run goes on without it. Only when every *source* rank (the recipe's
``source_roles``: Ape-X's actors, not its replay shards) has been lost for ``run.peer_grace_s`` does
the learner stop with ``all_peers_lost``. After the stop, :meth:`PeerWatch.await_peers` waits until
every live peer has heard it.
"""

from __future__ import annotations

import queue
import time
from concurrent.futures import Future
from typing import Callable, Optional

from distrl.logging.tracker import RunTracker
from distrl.runtime import supervisor
from distrl.runtime.context import RoleContext
from distrl.transport.base import PeerLostError, TransportError

PING_INTERVAL_S = 0.25


def _take_one(q: queue.Queue) -> bool:
    """Take one item off ``q`` without waiting; whether there was one."""
    try:
        q.get_nowait()
        return True
    except queue.Empty:
        return False


class PeerWatch:
    """Liveness of every rank the learner's transport reaches (none for collective recipes)."""

    def __init__(self, ctx: RoleContext, tracker: RunTracker, paused_since: Callable[[float], bool] = lambda t: False):
        self.transport, self.roles, self.tracker = ctx.transport, dict(ctx.roles), tracker
        #: ``paused_since(t)``: was this process stopped after ``t``? A ping it sent before a pause of
        #: its own (SIGSTOP, then SIGCONT) may time out unread: that says nothing of the peer
        self.paused_since = paused_since
        self.grace_s, self.timeout_s = ctx.cfg.run.peer_grace_s, ctx.cfg.transport.call_timeout_s
        #: the other ranks a transport reaches
        self.ranks = [r for r in ctx.roles if r != ctx.rank] if ctx.transport is not None else []
        sources = ctx.recipe.source_roles if ctx.recipe is not None else frozenset()
        #: the ranks whose loss, all of them, stops the run (``all_peers_lost``): the recipe's source roles
        self.sources = [r for r in self.ranks if not sources or ctx.roles.get(r) in sources]
        self._pings: dict[int, tuple[float, Future]] = {}
        self._last_ping = 0.0
        self._all_lost_since: Optional[float] = None  # since when every source has been lost

    def all_lost(self) -> bool:
        """Has every source peer (:attr:`sources`) been lost for ``run.peer_grace_s``? Said in one
        line when it has; the wait starts again if one is no longer lost."""
        now = time.monotonic()
        if not self.sources or not set(self.sources) <= self.transport.lost_peers():
            self._all_lost_since = None
            return False
        if self._all_lost_since is None:
            self._all_lost_since = now
            for rank in self.sources:  # a failed call (not a ping) can declare a peer lost: record it now
                self.lose(rank, "a call to it failed")
        grace = self.grace_s
        if now - self._all_lost_since < grace:
            return False
        names = ", ".join(f"{r} ({self.roles.get(r, '?')})" for r in self.sources)
        print(f"[learner] every peer is lost (ranks {names}) for {grace:g} s: stopping with a checkpoint", flush=True)
        return True

    def heartbeat(self) -> None:
        """Ping every live peer; a failed or unanswered ping declares it lost, in one log line."""
        now = time.monotonic()
        t = self.transport
        for rank, (sent, fut) in list(self._pings.items()):
            if not fut.done():
                continue
            del self._pings[rank]
            try:
                fut.result()
            except PeerLostError as e:
                self.lose(rank, e.reason or "connection lost")
            except TransportError as e:  # a timeout: the peer is stopped, wedged or overloaded
                if not self.paused_since(sent):  # (or we were: then the next ping asks again)
                    self.lose(rank, str(e))
        if now - self._last_ping < PING_INTERVAL_S:
            return
        self._last_ping = now
        for rank in self.ranks:
            if rank not in t.lost_peers() and rank not in self._pings:
                self._pings[rank] = (now, t.call(rank, "ping", None, self.timeout_s))

    def lose(self, rank: int, reason: str) -> None:
        """Declare ``rank`` lost, once, in one log line and in ``summary.json``'s ``lost_ranks``."""
        if rank in self.tracker.lost:
            return
        self.transport.mark_lost(rank, reason)
        role = self.roles.get(rank, "?")
        self.tracker.lost[rank] = {
            "role": role,
            "wall_s": round(self.tracker.wall_s, 3),
            "time": time.time(),
            "reason": reason,
        }
        self.tracker.count("lost_peers")
        print(
            f"[learner] lost rank {rank} ({role}) at {self.tracker.wall_s:.1f}s: {reason}; going on without it",
            flush=True,
        )

    def await_peers(
        self, waiting: Callable[[], set[int]], drain: Optional[queue.Queue] = None, heartbeat: bool = False
    ) -> None:
        """After the stop: wait, bounded by the call timeout, until every live rank of ``waiting()``
        has heard it. ``drain``: the learner's bounded inbox, emptied meanwhile so that a sender
        blocked on it returns and hears the stop in its reply. ``heartbeat`` keeps pinging, so a
        peer that died meanwhile is declared lost instead of waited for."""
        deadline = time.monotonic() + self.timeout_s
        lost = self.transport.lost_peers
        while time.monotonic() < deadline and waiting() - lost():
            supervisor.beat()  # bounded by the call timeout: progress for the watchdog
            if heartbeat:
                self.heartbeat()
            if drain is None or not _take_one(drain):
                time.sleep(0.02)
