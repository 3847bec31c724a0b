"""The ``rpc`` backend: one process per rank, calls over ``torch.distributed.rpc`` (TensorPipe).

* ``_transports=["uv"]``: the default transports busy-poll (an idle agent burns 99% of a core);
  libuv sleeps in epoll.
* Only ``rpc_async`` of one module-level function, :func:`_dispatch`, which looks the method up
  in a per-process table. No RRef, no ``rpc.remote``, no distributed autograd: TensorPipe is in
  maintenance mode upstream, and the narrowest use of it is the easiest to replace.
* Handler errors come back as values, so an exception of an rpc future is the transport's own
  (a lost peer, a timeout), classified by its message.
* TensorDicts cross as ``(tag, batch_size, device, names, {key: tensor | nested})``. A
  TensorDict pickles through rpc intact and as fast (equal round trips at 8 to 64k rows), but
  ships tensordict's private ``__dict__`` (a locked one arrives locked); the plain form arrives
  as a fresh TensorDict. Lazy stacks and tensorclasses are pickled whole.
* :meth:`RpcTransport.start` meets every rank at a barrier of its own on the MASTER_ADDR:PORT
  store (keys prefixed by torchrun's run id and restart count), so a rank that never starts is
  named; then rank 0 opens a fresh store on a free port for ``init_rpc``. After a ``torchrun
  --max-restarts`` restart, torchrun's shared store still holds the dead round's addresses, and
  ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` helps only in the launcher's environment.
* :meth:`RpcTransport.close` runs ``rpc.shutdown`` in a daemon thread and stops waiting at its
  timeout: with a dead or stopped peer, shutdown can hang past any timeout given to it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from concurrent.futures import Future
from datetime import timedelta
from typing import Any, Optional

import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase
from torch.distributed import rpc as torch_rpc

from distrl.runtime.network import LoopbackTCPStore, single_machine
from distrl.transport.base import CallTimeoutError, Handler, PeerLostError, RemoteError, Transport, TransportError

log = logging.getLogger(__name__)

_HANDLERS: dict[str, Handler] = {}  # rpc is process-global, and so is what this process serves
_ACTIVE: list["RpcTransport"] = []  # at most one started transport per process
_TD_TAG = "distrl.td"
_LOST_MARKERS = (
    "eof",
    "end of file",
    "pipe closed",
    "connection closed",
    "connection reset",
    "connection refused",
    "broken pipe",
    "econnreset",
    "econnrefused",
    "epipe",
)


def _encode(obj: Any) -> Any:
    """A plain TensorDict becomes nested tuples and dicts of tensors; anything else passes as is."""
    if type(obj) is not TensorDict:  # None, lazy stacks, tensorclasses: rpc pickles them whole
        return obj
    items = {k: _encode(v) if isinstance(v, TensorDictBase) else v for k, v in obj.items()}
    names = obj.names if any(n is not None for n in obj.names) else None
    return (_TD_TAG, tuple(obj.batch_size), None if obj.device is None else str(obj.device), names, items)


def _decode(obj: Any) -> Any:
    """Inverse of :func:`_encode`."""
    if isinstance(obj, tuple) and len(obj) == 5 and obj[0] == _TD_TAG:
        _, batch_size, device, names, items = obj
        return TensorDict({k: _decode(v) for k, v in items.items()}, batch_size, device=device, names=names)
    return obj


def _listening(addr: str, port: int, deadline: float) -> bool:
    """Whether ``addr:port`` accepts a connection before ``deadline``."""
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, port), timeout=min(0.5, max(0.05, deadline - time.monotonic()))).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def _dispatch(method: str, payload: Any) -> tuple:
    """The only function rpc runs: ``method``'s handler, as ``("ok", encoded result)`` or
    ``("err", type name, message, traceback)``."""
    handler = _HANDLERS.get(method)
    if handler is None:
        return ("err", "LookupError", f"no method {method!r} is served here", "")
    try:
        return ("ok", _encode(handler(_decode(payload))))
    except Exception as e:  # the caller gets it as RemoteError
        return ("err", type(e).__name__, str(e), traceback.format_exc())


class RpcTransport(Transport):
    """One rank's endpoint over ``torch.distributed.rpc``; worker names are ``f"rank{r}"``.

    ``timeout`` bounds every call by default, ``init_timeout`` bounds :meth:`start`,
    ``num_threads`` runs incoming handlers, ``role_names`` (rank -> role) names roles in errors.
    ``MASTER_ADDR``/``MASTER_PORT`` come from the environment. One transport per process.
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        timeout: float = 30.0,
        init_timeout: float = 60.0,
        num_threads: int = 16,
        role_names: Optional[dict[int, str]] = None,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        if timeout <= 0 or init_timeout <= 0:
            raise ValueError("timeouts must be positive (rpc reads 0 as no timeout)")
        self.rank, self.world_size, self.timeout = rank, world_size, timeout
        self.init_timeout, self.num_threads = init_timeout, num_threads
        self.role_names = dict(role_names or {})
        self._lost: dict[int, str] = {}
        self._state = "new"  # -> "started" -> "closed"
        self._lock = threading.Lock()
        self._stores: list = []  # kept alive: rank 0 serves them to the others
        self._in_flight = 0  # calls this rank awaits; close() lets them drain before a graceful exit
        self._drained = threading.Condition(self._lock)

    @classmethod
    def from_env(cls, **kw) -> "RpcTransport":
        """Build from torchrun's ``RANK`` and ``WORLD_SIZE``; ``kw`` go to the constructor."""
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise TransportError("RANK and WORLD_SIZE are not set: launch with torchrun")
        return cls(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), **kw)

    def _who(self, rank: int) -> str:
        return f"rank {rank}" + (f" ({self.role_names[rank]})" if self.role_names.get(rank) else "")

    def serve(self, method: str, handler: Handler) -> None:
        """Expose ``handler`` under ``method``; it runs on rpc's worker threads."""
        _HANDLERS[method] = handler

    def start(self) -> None:
        """Meet every rank, then ``init_rpc``, or raise :class:`TransportError` naming who is missing.

        Both run in a daemon thread given up at ``init_timeout``: ``init_rpc`` alone can wait 30 min.
        """
        addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
        if not (addr and port):
            raise TransportError("MASTER_ADDR and MASTER_PORT must be set (torchrun sets them)")
        with self._lock:
            if self._state != "new" or _ACTIVE:
                raise TransportError("start() once, with one RpcTransport per process")
            _ACTIVE.append(self)
            self._state = "started"
        os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # for any launcher we start
        status: dict[str, Any] = {"stage": "store", "missing": [], "error": None}
        deadline = time.monotonic() + self.init_timeout
        thread = threading.Thread(
            target=self._join, args=(addr, int(port), deadline, status), name="distrl-rpc-start", daemon=True
        )
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
        if status["stage"] == "done":
            return
        _ACTIVE.remove(self)
        self._state = "closed"
        missing = ", ".join(map(self._who, status["missing"])) or "no rank"
        why = {
            "store": f"no store at {addr}:{port}, so {self._who(0)} did not start",
            "barrier": f"{missing} did not start",
            "rpc": "init_rpc did not finish although every rank started",
        }.get(status["stage"], "failed")
        error = status["error"]
        raise TransportError(
            f"rank {self.rank}: {why} within {self.init_timeout:.3g}s" + (f" ({error})" if error else "")
        ) from error

    def _join(self, addr: str, port: int, deadline: float, status: dict) -> None:
        # A step in C++ that outlives start() makes the exit abort, so watch the deadline here too.
        left = lambda: timedelta(seconds=max(0.1, deadline - time.monotonic()))  # noqa: E731
        try:
            agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
            if (self.rank != 0 or agent_store) and not _listening(addr, port, deadline - 0.3):
                return  # a TCPStore client would retry past its timeout
            # on one machine every store distrl hosts listens on loopback only (distrl/runtime/network.py)
            TCPStore = LoopbackTCPStore if single_machine() else dist.TCPStore  # noqa: N806
            store = TCPStore(
                addr, port, None, self.rank == 0 and not agent_store, left(), wait_for_workers=False, multi_tenant=True
            )  # rank 0 hosts it
            self._stores.append(store)
            status["stage"] = "barrier"
            prefix = "distrl/{}/{}/".format(
                os.environ.get("TORCHELASTIC_RUN_ID", "none"), os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            )
            keys = [f"{prefix}joined/{r}" for r in range(self.world_size)]
            store.set(keys[self.rank], str(os.getpid()))
            while True:  # polled, so that the missing ranks are known at any moment
                status["missing"] = [r for r, k in enumerate(keys) if not store.check([k])]
                if not status["missing"]:
                    break
                if time.monotonic() > deadline - 0.3:
                    return
                time.sleep(0.05)
            status["stage"] = "rpc"
            if self.rank == 0:  # a fresh store for init_rpc: see the module docstring
                rpc_store = TCPStore(addr, 0, None, True, left(), wait_for_workers=False, multi_tenant=True)
                self._stores.append(rpc_store)
                store.set(prefix + "rpc_port", str(rpc_store.port))
            store.set_timeout(left())
            opts = torch_rpc.TensorPipeRpcBackendOptions(
                num_worker_threads=self.num_threads,
                rpc_timeout=self.timeout,
                init_method=f"tcp://{addr}:{int(store.get(prefix + 'rpc_port'))}",
                _transports=["uv"],
            )
            torch_rpc.init_rpc(f"rank{self.rank}", rank=self.rank, world_size=self.world_size, rpc_backend_options=opts)
            status["stage"] = "done"
        except Exception as e:
            status["error"] = e

    def call(self, dst: int, method: str, td: Optional[TensorDict] = None, timeout: Optional[float] = None) -> Future:
        """Call ``method`` on rank ``dst``; see :meth:`Transport.call`."""
        if not 0 <= dst < self.world_size:
            raise ValueError(f"rank {dst} outside world size {self.world_size}")
        limit = self.timeout if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be positive, got {limit}")
        out: Future = Future()
        out.set_running_or_notify_cancel()  # an rpc in flight cannot be cancelled
        if dst in self._lost or self._state != "started":
            out.set_exception(
                PeerLostError(dst, self.role_names.get(dst, ""), self._lost[dst])
                if dst in self._lost
                else TransportError(f"transport is {self._state}, not started")
            )
            return out
        try:
            fut = torch_rpc.rpc_async(f"rank{dst}", _dispatch, args=(method, _encode(td)), timeout=limit)
        except Exception as e:  # unpicklable payload, agent already shut down
            out.set_exception(self._classify(e, dst, method, limit))
            return out
        with self._lock:
            self._in_flight += 1
        fut.add_done_callback(lambda f: self._finish(f, out, dst, method, limit))
        return out

    def _finish(self, fut, out: Future, dst: int, method: str, limit: float) -> None:
        result, err = None, None
        try:  # whatever happens, ``out`` resolves: call_sync waits on it without a timeout
            reply = fut.value()
            if reply[0] == "ok":
                result = _decode(reply[1])
            else:
                err = RemoteError(f"{method} on {self._who(dst)}: {reply[1]}: {reply[2]}")
                err.remote_traceback = reply[3]
        except Exception as e:
            err = self._classify(e, dst, method, limit)
        with self._lock:
            self._in_flight -= 1
            self._drained.notify_all()
        if err is None:
            out.set_result(result)
        else:
            out.set_exception(err)

    def _classify(self, e: Exception, dst: int, method: str, limit: float) -> TransportError:
        text = (str(e).strip() or type(e).__name__).splitlines()[0]
        if "ran for more than set timeout" in text.lower():
            return CallTimeoutError(f"{method} on {self._who(dst)}: no reply in {limit:.3g}s")
        if any(m in text.lower() for m in _LOST_MARKERS):
            self.mark_lost(dst, text)
            return PeerLostError(dst, self.role_names.get(dst, ""), text)
        return TransportError(f"{method} on {self._who(dst)}: {text}")

    def lost_peers(self) -> set[int]:
        """Ranks declared lost: by a failed call or by :meth:`mark_lost`."""
        return set(self._lost)

    def mark_lost(self, rank: int, reason: str = "") -> None:
        """Declare ``rank`` lost; later calls to it fail at once without touching rpc."""
        if rank not in self._lost:
            self._lost.setdefault(rank, reason)
            log.info("rank %d: lost %s: %s", self.rank, self._who(rank), reason)  # roles say it

    def close(self, timeout: float = 10.0, graceful: bool = True) -> None:
        """Leave the group within ``timeout`` seconds; idempotent, and safe before :meth:`start`.

        ``graceful=False`` skips the collective shutdown: for roles whose own protocol already
        told every peer to stop, it saves waiting on the slowest rank.

        Calls in flight get up to a third of ``timeout``; if none is left and no peer is known
        lost (graceful shutdown waits for both), the collective graceful shutdown gets 40% of the
        rest (a stopped peer doubles that); else, or then, a local one. If that hangs too (a
        handler that never returns), it is abandoned and the process may abort at exit (SIGABRT).
        """
        with self._lock:
            started, self._state = self._state == "started", "closed"
            if not started:
                return
            deadline = time.monotonic() + timeout
            graceful = graceful and self._drained.wait_for(lambda: self._in_flight == 0, timeout / 3) and not self._lost
        graceful_s = max(0.1, 0.4 * (deadline - time.monotonic()))

        def shutdown() -> None:
            if graceful:
                # rpc logs its failure with a traceback, for which torch's log formatter imports
                # torch._dynamo: seconds of a busy core. Our one line says enough.
                rpc_log = logging.getLogger("torch.distributed.rpc.api")
                level = rpc_log.level
                rpc_log.setLevel(logging.CRITICAL)
                try:
                    torch_rpc.shutdown(graceful=True, timeout=graceful_s)
                    return
                except Exception as e:  # a peer died, stopped or never came to shutdown
                    log.info("rank %d: graceful rpc shutdown failed: %s", self.rank, e)
                finally:
                    rpc_log.setLevel(level)
            try:
                torch_rpc.shutdown(graceful=False)
            except Exception as e:  # already finalized by the graceful attempt
                log.debug("rank %d: rpc shutdown: %s", self.rank, e)

        thread = threading.Thread(target=shutdown, name="distrl-rpc-shutdown", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            log.warning("rank %d: rpc shutdown still running after %.1fs; abandoned", self.rank, timeout)
        else:
            _HANDLERS.clear()
        self._stores.clear()
        _ACTIVE.remove(self)
