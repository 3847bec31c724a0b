"""Where distrl's processes listen, and why a one-machine launch listens on loopback only.

``torch.distributed.rpc`` unpickles what arrives, so whoever reaches a rank's ports can run code
in it. A launch on one machine has no reason to be reachable from elsewhere: there every
listening socket distrl opens (TensorPipe, gloo, the stores) binds 127.0.0.1. A multi-node
launch listens on the interface given by ``TP_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME``
(docs/concepts.md, "Network and security"): trusted networks only.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch.distributed as dist

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def single_machine() -> bool:
    """Is this a torchrun job on one machine whose store is on loopback (``--standalone``)?"""
    return (
        os.environ.get("MASTER_ADDR", "localhost") in LOOPBACK_NAMES and os.environ.get("GROUP_WORLD_SIZE", "1") == "1"
    )


def loopback_interface() -> str | None:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS), if there is one."""
    names = {name for _, name in socket.if_nameindex()}
    return next((n for n in ("lo", "lo0") if n in names), None)


def prefer_loopback() -> bool:
    """On one machine, make TensorPipe and gloo listen on loopback (unless the user chose an
    interface already); returns whether they will."""
    lo = loopback_interface()
    if not (single_machine() and lo):
        return False
    os.environ.setdefault("TP_SOCKET_IFNAME", lo)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
    return os.environ["TP_SOCKET_IFNAME"] == lo


def loopback_listener(port: int = 0) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` (0: any free port), for a store to serve on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(512)
    return sock


class LoopbackTCPStore(dist.TCPStore):
    """``TCPStore`` whose server listens on 127.0.0.1 only (``TCPStore`` itself binds every
    interface); a client is a plain ``TCPStore``. Same arguments as ``TCPStore``."""

    _listeners: list[socket.socket] = []  # kept open for the life of the process, as the stores are

    def __init__(
        self,
        host_name: str,
        port: int,
        world_size=None,
        is_master: bool = False,
        timeout: timedelta = timedelta(seconds=300),
        wait_for_workers: bool = True,
        multi_tenant: bool = False,
        master_listen_fd=None,
        use_libuv: bool = True,
    ):
        if is_master and master_listen_fd is None:
            sock = loopback_listener(port)
            self._listeners.append(sock)
            port, master_listen_fd = sock.getsockname()[1], sock.fileno()
        super().__init__(
            host_name, port, world_size, is_master, timeout, wait_for_workers, multi_tenant, master_listen_fd, use_libuv
        )
