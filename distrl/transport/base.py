"""The transport interface: how roles on different ranks call each other.

A role exposes methods by name with :meth:`Transport.serve`; any rank calls them with
:meth:`Transport.call`, which returns a :class:`concurrent.futures.Future` resolving to a
``TensorDict`` (or ``None``). Every call is bounded by a timeout. Handlers run on the
transport's worker threads, so a handler must never wait on another call (with TensorPipe that
deadlocks the thread pool for good) and must not block for long: roles hand work to their own
loops through bounded queues instead.

Two backends implement it: ``local`` (threads in one process, world size 1) and ``rpc``
(``torch.distributed.rpc`` over TensorPipe's uv transport, one process per rank).
"""

from __future__ import annotations

import abc
from concurrent.futures import Future
from typing import Callable, Optional

from tensordict import TensorDict

Handler = Callable[[Optional[TensorDict]], Optional[TensorDict]]


class TransportError(RuntimeError):
    """Base class of every error a transport raises."""


class PeerLostError(TransportError):
    """The destination rank died or was declared lost; calls to it fail at once from now on."""

    def __init__(self, rank: int, role: str = "", reason: str = ""):
        self.rank, self.role, self.reason = rank, role, reason
        who = f"rank {rank}" + (f" ({role})" if role else "")
        super().__init__(f"lost {who}" + (f": {reason}" if reason else ""))


class CallTimeoutError(TransportError):
    """A call got no reply within its timeout (a stopped or overloaded peer)."""


class RemoteError(TransportError):
    """The remote handler raised; the message carries its type and text."""


class Transport(abc.ABC):
    """One rank's endpoint. ``rank`` and ``world_size`` follow torchrun's numbering.

    Life cycle: ``serve(...)`` every method this rank exposes, then ``start()`` (a barrier in
    the rpc backend: it returns once every rank has joined), then ``call(...)`` freely, then
    ``close()``, which never hangs, also when a peer died.
    """

    rank: int
    world_size: int

    @abc.abstractmethod
    def serve(self, method: str, handler: Handler) -> None:
        """Expose ``handler`` to every rank under ``method``. Call before :meth:`start`."""

    @abc.abstractmethod
    def start(self) -> None:
        """Join the group. Raises :class:`TransportError` naming what is missing on failure."""

    @abc.abstractmethod
    def call(self, dst: int, method: str, td: Optional[TensorDict] = None, timeout: Optional[float] = None) -> Future:
        """Call ``method`` on rank ``dst`` asynchronously.

        The future resolves to the handler's return value, or raises :class:`PeerLostError`,
        :class:`CallTimeoutError` or :class:`RemoteError`. ``timeout`` defaults to the
        transport's configured call timeout; it is never unbounded.
        """

    def call_sync(
        self, dst: int, method: str, td: Optional[TensorDict] = None, timeout: Optional[float] = None
    ) -> Optional[TensorDict]:
        """Blocking :meth:`call`; never call it from inside a handler."""
        return self.call(dst, method, td, timeout).result()

    @abc.abstractmethod
    def lost_peers(self) -> set[int]:
        """Ranks this endpoint has declared lost (a failed call, or an explicit :meth:`mark_lost`)."""

    @abc.abstractmethod
    def mark_lost(self, rank: int, reason: str = "") -> None:
        """Declare ``rank`` lost: later calls to it fail at once with :class:`PeerLostError`."""

    @abc.abstractmethod
    def close(self, timeout: float = 10.0, graceful: bool = True) -> None:
        """Leave the group within ``timeout`` seconds, whether or not peers are alive.

        ``graceful`` lets calls in flight everywhere finish first (a collective); without it the
        rank leaves at once, which is right when the role's protocol has already ended its calls.
        """
