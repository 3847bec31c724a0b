"""Is a peer that stopped answering gone, or only busy or paused? Ask it, and wait while it may be.

A call that times out says little: the peer may be gone (its process dead: then a call fails at
once, a refused or lost connection), busy (a full-game Atari evaluation, a multi-GB checkpoint; its
transport threads still answer a ping) or paused (SIGSTOP, a debugger: nothing answers until
SIGCONT). Leaving on a timeout turns a learner's pause into the loss of every actor, and the run
into ``all_peers_lost``. So a role asks with pings, one in flight at a time:

* :class:`PeerProbe`: an answer is a word from the peer, an unanswered ping (a busy or paused peer)
  changes nothing, a failed one says why the peer is gone. Ape-X's replay shards watch their
  learner so (``distrl/replay/learner_watch.py``);
* :func:`wait_while_alive`: an actor whose call to the learner timed out pings it until it answers
  (it goes on), a ping fails (it leaves), or ``limit_s`` pass without a word (it leaves: a learner
  frozen for good, which the learner's own watchdog, ``run.watchdog_s``, ends anyway).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Callable, Optional

from distrl.transport.base import CallTimeoutError, PeerLostError, Transport, TransportError


class PeerProbe:
    """Pings ``rank`` one at a time (module docstring); ``on_word`` is called on every answer."""

    def __init__(self, transport: Transport, rank: int, on_word: Callable[[], None] = lambda: None):
        self.t, self.rank, self.on_word = transport, rank, on_word
        self._ping: Optional[Future] = None

    def gone(self, timeout: float) -> Optional[str]:
        """Why the peer is gone, once a ping has failed; ``None`` while it answers, or while a ping
        (bounded by ``timeout``) is out or has timed out. Sends the next ping when none is out."""
        if self._ping is not None and self._ping.done():
            ping, self._ping = self._ping, None
            try:
                ping.result()
                self.on_word()
            except CallTimeoutError:  # a busy or paused peer is not a gone one
                pass
            except TransportError as e:
                return str(e)
        if self._ping is None:
            self._ping = self.t.call(self.rank, "ping", None, timeout)
        return None


def wait_while_alive(
    transport: Transport,
    rank: int,
    who: str,
    timeout_s: float,
    limit_s: float,
    peer: str = "the learner",
    poll_s: float = 0.05,
) -> float:
    """After a call to ``rank`` timed out: wait until a ping to it is answered, and return the wait
    (seconds). Raises :class:`PeerLostError` when a ping fails (the peer is gone) and
    :class:`CallTimeoutError` after ``limit_s`` without an answer; ``timeout_s`` bounds each ping.
    ``who`` names the waiting role and ``peer`` the one waited on in the two log lines (the wait, its end)."""
    start, answered = time.monotonic(), []
    probe = PeerProbe(transport, rank, lambda: answered.append(True))
    print(
        f"[{who}] {peer} (rank {rank}) did not answer in {timeout_s:g}s: waiting while it answers pings or may "
        f"be paused (at most {limit_s:g}s)",
        flush=True,
    )
    while True:
        why = probe.gone(timeout_s)
        waited = time.monotonic() - start
        if why is not None:
            raise PeerLostError(rank, reason=why)
        if answered:
            print(f"[{who}] {peer} answered after {waited:.1f}s: going on", flush=True)
            return waited
        if waited > limit_s:
            raise CallTimeoutError(f"rank {rank} answered no ping in {waited:.0f}s")
        time.sleep(poll_s)


def patience_s(call_timeout_s: float, watchdog_s: float) -> float:
    """How long an actor waits on a silent learner (``limit_s`` of :func:`wait_while_alive`): as long
    as the learner's watchdog (``run.watchdog_s``, 0: none) may let a frozen learner live, plus a call
    timeout; at least two call timeouts."""
    return max(watchdog_s, call_timeout_s) + call_timeout_s
