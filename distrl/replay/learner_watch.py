"""How long a replay shard serves: :class:`LearnerWatch`, its view of the learner.

A shard outlives its learner by a bounded time only, yet must outlast a learner that is merely busy
(a full-game Atari evaluation, a checkpoint of gigabytes) or paused (SIGSTOP, then SIGCONT):
leaving loses the replay, which only the learner's checkpoint keeps.

* Every call from the learner is a word from it, its liveness pings (every 0.25 s) included.
* After ``ReplayConfig.idle_s`` without one, the shard pings the learner itself, one ping at a time.
  An answer is a word; an unanswered ping (a busy or stopped learner) changes nothing; a failed one
  (a refused or lost connection: the learner is gone) ends the shard. So does silence for
  ``max(run.watchdog_s, idle_s)`` more: a frozen learner that no watchdog ended.
* A stop signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT: the whole job gets it together) does not end the
  shard at once: it serves until the learner's ``replay_stop`` with ``exit``, which comes after the
  learner's last checkpoint has read the shard's contents, for ``transport.call_timeout_s`` plus
  :data:`SIGTERM_MARGIN_S` at most, and leaves sooner when a ping finds the learner gone.
"""

from __future__ import annotations

import time
from typing import Optional

from distrl.runtime.signals import StopSignals
from distrl.transport.base import Transport
from distrl.transport.liveness import PeerProbe

#: seconds a signalled shard waits for the learner's stop beyond ``transport.call_timeout_s``
SIGTERM_MARGIN_S = 10.0
#: bound on each ping a signalled shard sends the learner, one at a time (a lost connection ends the wait)
SIGTERM_PING_S = 1.0


class LearnerWatch:
    """Whether a shard (``name``, for its log lines) still has a learner to serve (module docstring).

    Args:
        learner: the learner's rank (``None``: no learner to ask; only silence and signals end it).
        idle_s: ``ReplayConfig.idle_s``; watchdog_s: ``run.watchdog_s``; call_timeout_s: the transport's.
    """

    def __init__(
        self,
        transport: Transport,
        learner: Optional[int],
        name: str,
        idle_s: float,
        watchdog_s: float,
        call_timeout_s: float,
    ):
        self.t, self.learner, self.name = transport, learner, name
        self.idle_s, self.watchdog_s, self.call_timeout_s = idle_s, watchdog_s, call_timeout_s
        self.signals = StopSignals()  #: a stop signal's time (``signals.at``): the learner's stop is awaited
        self.last_contact = time.monotonic()  #: of the learner's last word
        self.asking = False  #: the learner has been silent past ``idle_s`` (said once)
        self._said_signal = False
        #: the shard's own pings to the learner, one at a time: an answer is a word from it
        self.probe = None if learner is None else PeerProbe(transport, learner, self.word)

    def word(self) -> None:
        """A call from the learner came (handlers call it: any transport thread)."""
        self.last_contact = time.monotonic()

    def gone(self, timeout: float) -> Optional[str]:
        """Ask the learner (one ping in flight, bounded by ``timeout``): why it is gone, once a ping
        fails; ``None`` while it answers, or while a ping is out or has timed out (:class:`PeerProbe`)."""
        return None if self.probe is None else self.probe.gone(timeout)

    def wait_over(self) -> bool:
        """Should the shard leave now? Called on every turn of its loop (each says why, once)."""
        now = time.monotonic()
        if self.signals.at is not None:
            name, waited = self.signals.received.name, now - self.signals.at
            if not self._said_signal:
                print(f"{self.name} {name}: serving until the learner's last checkpoint", flush=True)
                self._said_signal = True
            if waited > self.call_timeout_s + SIGTERM_MARGIN_S:
                print(f"{self.name} {name}: no stop from the learner in {waited:.0f}s, exiting", flush=True)
                return True
            why = self.gone(SIGTERM_PING_S)
            if why:
                print(f"{self.name} {name}: the learner is gone ({why}), exiting", flush=True)
            return why is not None
        silent = now - self.last_contact
        if silent <= self.idle_s:
            self.asking = False
            return False
        if not self.asking:
            print(
                f"{self.name} no word from the learner in {self.idle_s:g}s: asking it (a busy or paused one is "
                "waited for)",
                flush=True,
            )
            self.asking = True
        if silent > self.idle_s + max(self.watchdog_s, self.idle_s):
            print(f"{self.name} no word from the learner in {silent:.0f}s, exiting", flush=True)
            return True
        why = self.gone(self.call_timeout_s)
        if why:
            print(f"{self.name} the learner is gone ({why}), {silent:.0f}s after its last word: exiting", flush=True)
        return why is not None
