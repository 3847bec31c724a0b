"""Where a :class:`distrl.FleetCollector`'s actors run: threads of this process (:class:`LocalFleet`)
or processes of their own over rpc (:class:`RpcFleet`).

Both build the ``impala`` recipe's ``actor`` role as ``distrl train`` does (the recipe's builder;
the rpc ranks through the runner's own ``run_rpc``), so a fleet's actor is the very role a training
run uses. A fleet gives the collector rank 0's ``transport``, then ``start()``, ``problem()`` (why
no more data can come, or ``None``) and ``stop(drain)`` (bounded; ``drain`` empties the collector's
queue so that actors blocked on it hear ``stop``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from distrl.recipes import get_recipe
from distrl.runtime.context import RoleContext
from distrl.config import Config
from distrl.transport.local import LocalHub

_CONFIG_ENV, _ROLES_ENV = "DISTRL_FLEET_CONFIG", "DISTRL_FLEET_ROLES"


def _wait(alive: Callable[[], bool], drain: Callable[[], None], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while alive() and time.monotonic() < deadline:
        drain()
        time.sleep(0.02)


class LocalFleet:
    """``len(roles) - 1`` actor threads over one in-process :class:`LocalHub`; rank 0 is the collector."""

    def __init__(self, run_cfg: Config, roles: dict[int, str], cfg):
        self.cfg = cfg
        self.hub = LocalHub(len(roles), run_cfg.transport.num_threads)
        self.ends = [self.hub.endpoint(r, cfg.call_timeout_s) for r in roles]
        self.transport = self.ends[0]
        recipe = get_recipe(run_cfg.recipe)
        self.actors = {
            r: recipe.builders["actor"](RoleContext(run_cfg, self.ends[r], r, roles, Path("."), recipe))
            for r in roles
            if r
        }
        self.errors: dict[int, BaseException] = {}
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for rank in self.actors:
            self.threads.append(
                threading.Thread(target=self._body, args=(rank,), name=f"distrl-fleet-actor-{rank}", daemon=True)
            )
            self.threads[-1].start()

    def _body(self, rank: int) -> None:
        try:
            self.actors[rank].run()
        except BaseException as e:  # reported by problem(): the collector raises it in the user's loop
            self.errors[rank] = e
        finally:
            self.ends[rank].close()

    def problem(self) -> Optional[str]:
        if any(t.is_alive() for t in self.threads):
            return None
        why = "; ".join(f"rank {r}: {type(e).__name__}: {e}" for r, e in sorted(self.errors.items()))
        return "every actor ended" + (f" ({why})" if why else "")

    def stop(self, drain: Callable[[], None]) -> None:
        # An actor hears stop in the reply to its next message: one unroll plus one queue wait away.
        _wait(lambda: any(t.is_alive() for t in self.threads), drain, self.cfg.call_timeout_s)
        for end in self.ends:
            end.close()
        self.hub.pool.shutdown(wait=True, cancel_futures=True)  # no thread of the fleet outlives it


class RpcFleet:
    """``world_size - 1`` actor processes (``python -m distrl.fleet.backends``) over the rpc transport,
    this process rank 0; every socket on 127.0.0.1. One at a time per process (rpc is process-global)."""

    def __init__(self, run_cfg: Config, roles: dict[int, str], cfg):
        import distrl
        from distrl.runtime.network import loopback_interface
        from distrl.transport.rpc import RpcTransport

        self.cfg, self.run_cfg, self.roles = cfg, run_cfg, roles
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        root = os.path.dirname(os.path.dirname(os.path.abspath(distrl.__file__)))  # the actors import this distrl
        # The fleet is a group of its own (also inside a torchrun job): its own store, hosted here,
        # and every socket of it on loopback (distrl/runtime/network.py says why).
        lo = loopback_interface()
        self.group_env = {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "GROUP_WORLD_SIZE": "1",
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            **({"TP_SOCKET_IFNAME": lo, "GLOO_SOCKET_IFNAME": lo} if lo else {}),
        }
        self.env = {
            **self.group_env,
            "WORLD_SIZE": str(len(roles)),
            "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
            _CONFIG_ENV: run_cfg.to_json(),
            _ROLES_ENV: json.dumps(roles),
        }
        self.transport = RpcTransport(
            0,
            len(roles),
            timeout=cfg.call_timeout_s,
            init_timeout=cfg.init_timeout_s,
            num_threads=run_cfg.transport.num_threads,
            role_names=roles,
        )
        self.procs: list[subprocess.Popen] = []
        self.started = False  # the group formed: the actors can hear stop

    def start(self) -> None:
        for rank in (r for r in self.roles if r):
            env = {**os.environ, **self.env, "RANK": str(rank), "OMP_NUM_THREADS": str(self.cfg.torch_threads)}
            self.procs.append(subprocess.Popen([sys.executable, "-m", "distrl.fleet.backends"], env=env))
        # RpcTransport.start also sets TORCH_DISABLE_SHARE_RDZV_TCP_STORE (for launchers it starts): in the
        # user's process that would leak into every torchrun they start later, so it is restored too
        saved = {k: os.environ.get(k) for k in (*self.group_env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE")}
        os.environ.update(self.group_env)  # start() and init_rpc read them, as under torchrun; restored after
        try:
            self.transport.start()
            self.started = True
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def problem(self) -> Optional[str]:
        if any(p.poll() is None for p in self.procs):
            return None
        return f"every actor process ended (exit codes {[p.returncode for p in self.procs]})"

    def stop(self, drain: Callable[[], None]) -> None:
        if self.started:
            _wait(lambda: any(p.poll() is None for p in self.procs), drain, self.cfg.call_timeout_s)
        self.transport.close(timeout=10.0, graceful=False)  # the actors have heard stop: nothing in flight matters
        for p in self.procs:
            if not self.started:  # a group that never formed: its ranks wait at the barrier for nothing
                p.kill()
            try:
                p.wait(timeout=10.0)
            except subprocess.TimeoutExpired:  # a wedged actor: its rank is not worth a hang
                p.kill()
                p.wait()


def _actor_main() -> int:
    """One actor rank of an :class:`RpcFleet`, run as ``distrl train`` runs a rank (``run_rpc``)."""
    import torch

    from distrl.config import from_dict
    from distrl.cli.runner import Plan, run_rpc

    data = json.loads(os.environ[_CONFIG_ENV])
    recipe = get_recipe(data["recipe"])
    cfg = from_dict(Config, {**data, "algo": from_dict(type(recipe.default_config().algo), data["algo"])})
    roles = {int(r): name for r, name in json.loads(os.environ[_ROLES_ENV]).items()}
    torch.set_num_threads(cfg.run.torch_threads)
    run_rpc(Plan(recipe, cfg, roles, len(roles)), int(os.environ["RANK"]))
    return 0


if __name__ == "__main__":
    from distrl.runtime.supervisor import child_main

    child_main(_actor_main)  # dies with the collector's process (PR_SET_PDEATHSIG), exits with os._exit
