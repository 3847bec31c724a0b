"""How roles on different ranks call each other: one interface, an in-process and an rpc backend."""

from distrl.transport.base import CallTimeoutError, Handler, PeerLostError, RemoteError, Transport, TransportError
from distrl.transport.local import LocalHub, LocalTransport
from distrl.transport.rpc import RpcTransport

__all__ = [
    "Transport",
    "Handler",
    "TransportError",
    "PeerLostError",
    "CallTimeoutError",
    "RemoteError",
    "LocalHub",
    "LocalTransport",
    "RpcTransport",
]
