"""The one insert protocol of the replay service: :class:`Inserter` (Ape-X's actors and
:class:`~distrl.replay.buffer.ReplayServiceBuffer` send through it): held -> wait and re-send, shard
lost -> the next one, ``stop`` -> done."""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Callable, Optional

import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.replay.server import INSERT_N, INSERT_PROBED
from distrl.transport.base import RemoteError, Transport, TransportError


class Inserter:
    """The one insert protocol, for Ape-X's actors and :class:`ReplayServiceBuffer`.

    :meth:`send` puts one batch of transitions in flight to the current shard; :meth:`settle` waits
    until a shard has taken it. While the shard's rate limiter holds it back (``held``), it sleeps
    ``hold_sleep_s`` and asks again with a payload-free probe (``insert_probe``: the batch's size
    only), and sends the batch once a probe says the shard would take it (the sleeps are added to
    ``held_s``), marked ``insert_probed`` (the shard takes it while its limiter is within tolerance,
    even if another sender's insert came between). Once the shard has held a batch, every later one waits for
    :meth:`settle` and starts
    with a probe: a sender the limiter paces sends each batch once. When the shard is lost, the next
    live shard gets the batch; a ``stop`` reply ends it. One batch is in flight at a time.

    Args:
        shards: the replay ranks; ``first``: the index of the shard to start with.
        on_lost: told ``(rank, reason)`` when a shard fails a call (the buffer marks it lost).
        paced: probe before every batch from the first (a sender the limiter will pace: an Ape-X
            actor; its first held batch would otherwise cross twice).
    """

    TAKEN, STOPPED, NO_SHARD, HELD = "taken", "stopped", "no_shard", "held"

    def __init__(
        self,
        transport: Transport,
        shards: list[int],
        timeout: float,
        hold_sleep_s: float,
        first: int = 0,
        on_lost: Optional[Callable[[int, str], None]] = None,
        paced: bool = False,
    ):
        self.t, self.shards, self.timeout, self.hold_sleep_s = transport, shards, timeout, hold_sleep_s
        self.index = first
        self.shard = shards[first % len(shards)]
        self.on_lost = on_lost
        self.held_s = 0.0
        #: (the call in flight, None before the first probe; the batch; whether the call is a probe)
        self._in_flight: Optional[tuple[Optional[Future], TensorDict, bool]] = None
        self._paced = paced  # (or a batch was held): probe before every later one crosses
        self._held = False  # the batch in flight has been held

    def send(self, msg: TensorDict) -> None:
        """Put ``msg`` in flight to the current shard (or, paced, keep it for :meth:`settle`):
        ``transitions [N]`` with ``priority [N]``, or an Ape-X actor's packed window
        (``distrl.data.transitions``) with ``priority [N]``."""
        self._held = False
        fut = None if self._paced else self.t.call(self.shard, "insert", msg, self.timeout)
        self._in_flight = (fut, msg, self._paced)

    def _probe(self, msg: TensorDict) -> Future:
        n = msg[keys.PRIORITY].shape[0] if keys.PRIORITY in msg.keys() else msg[keys.TRANSITIONS].shape[0]
        return self.t.call(self.shard, "insert_probe", TensorDict({INSERT_N: torch.tensor(n)}), self.timeout)

    @staticmethod
    def _probed(msg: TensorDict) -> TensorDict:
        out = msg.clone(recurse=False)
        out[INSERT_PROBED] = torch.tensor(True)
        return out

    def next_shard(self) -> None:
        """Insert into the next live shard from now on (the buffer spreads batches round robin)."""
        self.index += 1
        live = [r for r in self.shards if r not in self.t.lost_peers()]
        if live:
            self.shard = live[self.index % len(live)]

    def settle(self, deadline: Optional[float] = None) -> str:
        """Wait for the batch in flight: :attr:`TAKEN` (also when none is), :attr:`STOPPED` (the
        replay service has stopped), :attr:`NO_SHARD` (every shard is lost) or :attr:`HELD` (still
        held back at ``deadline``, a ``time.monotonic()`` value; the batch stays in flight)."""
        if self._in_flight is None:
            return self.TAKEN
        fut, msg, probing = self._in_flight
        if fut is None:
            fut = self._probe(msg)
        while True:
            reply = None
            try:
                reply = fut.result()
            except RemoteError:
                raise
            except TransportError as e:  # the shard died: go on with another one, if any is left
                if self.on_lost is not None:
                    self.on_lost(self.shard, str(e))
                live = [r for r in self.shards if r not in self.t.lost_peers() and r != self.shard]
                if not live:
                    self._in_flight = None
                    return self.NO_SHARD
                self.shard = live[self.index % len(live)]
                probing = False  # the new shard gets the batch itself
            else:
                if bool(reply[keys.STOP]):
                    self._in_flight = None
                    return self.STOPPED
                if not bool(reply[keys.HELD]):
                    if not probing:
                        self._in_flight, self._paced = None, self._paced or self._held
                        return self.TAKEN
                    probing = False  # the shard would take it now: send it
                else:
                    self._held = True
                    if deadline is not None and time.monotonic() > deadline:
                        self._in_flight = (fut, msg, probing)
                        return self.HELD
                    time.sleep(self.hold_sleep_s)  # the rate limiter holds this sender back
                    self.held_s += self.hold_sleep_s
                    probing = True
            if probing:
                fut = self._probe(msg)
            else:  # a probe said yes (marked), or a new shard after a lost one (as it is)
                said_yes = reply is not None and not bool(reply[keys.HELD])
                fut = self.t.call(self.shard, "insert", self._probed(msg) if said_yes else msg, self.timeout)
