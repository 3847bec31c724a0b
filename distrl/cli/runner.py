"""Start a recipe: validate, then run this process's role(s) on the right transport.

Everything that can be wrong with a launch (config, env id, world size) is checked in
:func:`plan` before any process group starts; what only the learner can find (a ``--resume`` whose
checkpoints are all damaged) ends the run the same way, one line and exit status 2. World size 1
runs every role of the recipe in this process over the local transport, each non-learner role in
its own thread.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
from tensordict.nn.probabilistic import interaction_type, set_interaction_type

from distrl.recipes import get_recipe
from distrl.runtime.agreement import agree
from distrl.runtime.checkpoint import DamagedCheckpoints
from distrl.runtime.context import Recipe, RoleContext
from distrl.config import Config, override
from distrl.recipes import RECIPE_NAMES
from distrl.envs.gym import check_env_id, env_info, is_factory
from distrl.envs.info import EnvInfo
from distrl.runtime.job import job_id, write_private
from distrl.runtime.network import prefer_loopback
from distrl.runtime import faults
from distrl.runtime.signals import exit_status as signal_exit_status
from distrl.runtime.supervisor import supervise
from distrl.transport.local import LocalHub


@dataclass(frozen=True)
class Plan:
    """A validated launch: the recipe, the config, the rank table, the run directory."""

    recipe: Recipe
    cfg: Config
    roles: dict[int, str]
    world_size: int  #: processes (1 = everything in this one)
    job: str = ""  #: this launch's id (distrl.runtime.job), written to the run directory's job_id
    env: Optional[EnvInfo] = None  #: ``--env`` resolved once: every role of this process receives it

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.run.run_dir)


def default_run_dir(cfg: Config, job: str, recipe: Recipe) -> str:
    """``runs/<recipe>-<env>-<job id>``: new for every job, the same on every rank of one. A recipe
    given by path (``path/to/file.py:NAME``) is named by its ``Recipe.name``, not its path."""
    name, env = (re.sub(r"[^A-Za-z0-9_.-]+", "_", s) for s in (recipe.name, cfg.run.env))
    return str(Path("runs") / f"{name}-{env}-{job}")


def plan(cfg: Config, world_size: int) -> Plan:
    """Validate ``cfg`` for ``world_size`` processes; ``ValueError`` in one line if it cannot run."""
    recipe = get_recipe(cfg.recipe)
    if is_factory(cfg.run.env) and not recipe.takes_env_factory:
        able = ", ".join(n for n in RECIPE_NAMES if get_recipe(n).takes_env_factory)
        raise ValueError(
            f"{recipe.name} cannot step a TorchRL env factory (--env {cfg.run.env}); {able} can, and "
            "vecenv takes a batched one through --set algo.env_factory=module:function"
        )
    factory_ids = getattr(cfg.algo, "env_factory", "")  # a user env factory (vecenv) names envs gymnasium may not know
    if not factory_ids:
        check_env_id(cfg.run.env)
    if cfg.net.value_norm == "on" and not recipe.takes_value_norm:
        able = ", ".join(n for n in RECIPE_NAMES if get_recipe(n).takes_value_norm)
        raise ValueError(f"{recipe.name}'s loss does not normalise value targets (net.value_norm=on); {able}'s does")
    recipe.check_config(cfg)  # first: a recipe's own one-line reasons (vecenv: what to install or bring)
    env = None if factory_ids else _resolve_env(cfg.run.env)
    backend = cfg.transport.backend
    if backend == "local" and world_size > 1:
        raise ValueError("transport.backend=local runs in one process; launch without torchrun or use rpc")
    if backend == "rpc" and world_size == 1:
        raise ValueError("transport.backend=rpc needs torchrun with --nproc-per-node >= 2")
    roles = recipe.rank_table(world_size, cfg)
    job = job_id(cfg.transport.init_timeout_s)
    if not cfg.run.run_dir:
        cfg = override(cfg, **{"run.run_dir": default_run_dir(cfg, job, recipe)})
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) > 0 and not cfg.run.resume:
        # torchrun restarted the group after a failure: continue from the last checkpoint.
        cfg = override(cfg, **{"run.resume": True})
    return Plan(recipe, cfg, roles, world_size, job, env)


def _resolve_env(env_id: str) -> EnvInfo:
    """``env_id`` described once (the recipe's checks and every role then read this); an env gymnasium
    knows but cannot make here (a missing Box2D or MuJoCo) is a one-line ``ValueError``."""
    try:
        return env_info(env_id)
    except Exception as e:
        why = (str(e).strip().splitlines() or [""])[0]
        raise ValueError(f"cannot make {env_id!r} ({type(e).__name__}: {why}): install what it needs") from None


def check_run_dir(p: Plan) -> None:
    """Refuse to start a new run in a directory that holds one (its checkpoints would be pruned
    and its metrics mixed in); ``--resume`` continues it instead.

    Every rank checks, so all of them stop before the group forms. A directory whose ``job_id``
    is this job's (:func:`distrl.runtime.job.job_id`) was just prepared by this job's rank 0, which
    passed the check; any other job's run, whatever torchrun was given, is refused."""
    if p.cfg.run.resume:
        return check_resume_config(p)
    if not (p.run_dir / "config.json").exists():
        return
    marker = p.run_dir / "job_id"
    if p.job and marker.is_file() and marker.read_text() == p.job:
        return
    raise ValueError(f"{p.run_dir} already holds a run: add --resume to continue it, or choose another --run-dir")


#: what every ``--resume`` must keep: the checkpoint's weights and optimizer state have its shapes
FIXED_ON_RESUME = ("recipe", "run.env", "net")


def _field(d: dict, path: str):
    for part in path.split("."):
        d = d.get(part, {}) if isinstance(d, dict) else {}
    return d


def _changes(old, new, path: str) -> list[str]:
    """``path old -> new`` for each leaf of the two config dicts that differs (a field the old one
    lacks, added to distrl since, is not a change: its default keeps the old behaviour)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in sorted(old) for c in _changes(old[k], new.get(k), f"{path}.{k}")]
    return [] if old == new else [f"{path} {old!r} -> {new!r}"]


def check_resume_config(p: Plan) -> None:
    """A ``--resume`` that changes what the checkpoint is shaped by (the network, the env, the
    recipe, ``Recipe.fixed_on_resume``) fails here in one line, before ``config.json`` is rewritten
    or any process group starts; other changes (``algo.lr``, budgets) go on."""
    saved = p.run_dir / "config.json"
    if not saved.is_file():
        return
    try:
        old = json.loads(saved.read_text())
    except (OSError, ValueError):
        return  # unreadable: the checkpoint's own load decides
    new = json.loads(p.cfg.to_json())  # as config.json holds it (lists, not tuples)
    fixed = FIXED_ON_RESUME + p.recipe.fixed_on_resume
    changed = [c for path in fixed for c in _changes(_field(old, path), _field(new, path), path)]
    if changed:
        raise ValueError(
            f"--resume cannot change {', '.join(changed)}: the checkpoints in {p.run_dir} were trained with "
            "the old value; resume without it, or start a new run with another --run-dir"
        )


def _prepare_run_dir(p: Plan) -> None:
    p.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # owner-only also when runner.run is called directly
    # by name, never through a symlink (distrl/runtime/job.py)
    write_private(p.run_dir / "job_id", p.job)  # before config.json: see check_run_dir
    write_private(p.run_dir / "config.json", p.cfg.to_json())
    write_private(p.run_dir / "roles.json", json.dumps({str(r): n for r, n in p.roles.items()}, indent=2))


def _ping(_td):
    return None


#: exit status of a run by its stop reason (anything not listed ends with 0); a stop signal's is
#: ``128 + N``, as a shell reports a process it ended (SIGTERM 143, SIGINT 130, SIGHUP 129, SIGQUIT 131)
EXIT_CODES = {"sigterm": 143, "nonfinite_loss": 3, "all_peers_lost": 4, "checkpoint_failed": 7}


def exit_code(summary: Optional[dict]) -> int:
    reason = (summary or {}).get("stop_reason")
    return EXIT_CODES.get(reason) or signal_exit_status(reason) or 0


def _exit_status(body: Callable[..., Optional[dict]], *args) -> int:
    """The exit status of ``body(*args)``, a run; a resume whose checkpoints are all damaged is, like
    bad input, one line on stderr and status 2 (rather than a traceback, or a silent fresh start)."""
    try:
        return exit_code(body(*args))
    except DamagedCheckpoints as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


def run(p: Plan, rank: int = 0) -> int:
    """Run this process's share of plan ``p``; returns the process's exit status."""
    torch.set_num_threads(p.cfg.run.torch_threads)
    if rank == 0:
        _prepare_run_dir(p)
    if p.world_size == 1:
        return _exit_status(_run_local, p)
    why = agree(rank, p.cfg.to_json(), p.cfg.transport.init_timeout_s)  # same options and code on every rank
    if why:
        print(f"error: {why}", file=sys.stderr, flush=True)
        return 2
    prefer_loopback()  # one machine: TensorPipe and gloo listen on 127.0.0.1 only (distrl/runtime/network.py)
    role = p.roles[rank]
    body = _run_collective if p.recipe.group == "collective" else run_rpc
    return supervise(
        lambda: _exit_status(body, p, rank),
        rank,
        role,
        critical=role in p.recipe.critical_roles,
        grace_s=p.cfg.transport.call_timeout_s + 10,
        watchdog_s=p.cfg.run.watchdog_s,
    )


def _run_local(p: Plan) -> Optional[dict]:
    # TorchRL's collectors sample under set_exploration_type, which saves and restores one process-wide
    # mode: two role threads interleaving their enter/exit can leave it at "random" for good, and a TorchRL
    # actor the caller builds afterwards (load_policy's) would then sample, not play its mode. Measured:
    # impala and apex on a TorchRL env factory, world size 1, left "random" behind. So the run puts back
    # what it found.
    with set_interaction_type(interaction_type()):
        return _run_local_roles(p)


def _run_local_roles(p: Plan) -> Optional[dict]:
    hub = LocalHub(len(p.roles), p.cfg.transport.num_threads)
    endpoints = [hub.endpoint(r, p.cfg.transport.call_timeout_s) for r in p.roles]
    roles = []
    for rank, name in p.roles.items():
        endpoints[rank].serve("ping", _ping)
        roles.append(
            p.recipe.builders[name](RoleContext(p.cfg, endpoints[rank], rank, p.roles, p.run_dir, p.recipe, p.env))
        )
    errors: dict[int, BaseException] = {}

    def body(rank: int) -> None:
        try:
            roles[rank].run()
        except BaseException as e:  # surfaced below; the learner sees the rank as lost
            errors[rank] = e
            endpoints[0].mark_lost(rank, f"{type(e).__name__}: {e}")
        finally:
            endpoints[rank].close()

    threads = [
        threading.Thread(target=body, args=(r,), name=f"distrl-{p.roles[r]}-{r}", daemon=True) for r in p.roles if r
    ]
    for t in threads:
        t.start()
    try:
        summary = roles[0].run()
    finally:
        endpoints[0].close()
        for t in threads:
            t.join(timeout=p.cfg.transport.call_timeout_s)
    for rank, e in errors.items():
        print(f"[runner] rank {rank} ({p.roles[rank]}) failed: {type(e).__name__}: {e}", flush=True)
    return summary


def run_rpc(p: Plan, rank: int) -> Optional[dict]:
    """Rank ``rank`` of plan ``p`` over the rpc transport: builds its role, starts the transport, runs
    the role until the job ends and closes the transport (the role's summary on the learner)."""
    from distrl.transport.rpc import RpcTransport

    # init_rpc uses a gloo group internally and torch warns about its own use of it.
    warnings.filterwarnings("ignore", message="You are using a Backend")

    t = p.cfg.transport
    transport = RpcTransport.from_env(
        timeout=t.call_timeout_s, init_timeout=t.init_timeout_s, num_threads=t.num_threads, role_names=p.roles
    )
    transport.serve("ping", _ping)
    role = p.recipe.builders[p.roles[rank]](RoleContext(p.cfg, transport, rank, p.roles, p.run_dir, p.recipe, p.env))
    try:
        if faults.due("never_start", rank, 0):
            faults.record("never_start", rank, 0)
            time.sleep(10 * t.init_timeout_s)
        transport.start()
        return role.run()
    finally:
        # Not the graceful (collective) shutdown: every role's protocol ends with the learner's
        # "stop" reply, so nothing is in flight that matters, and waiting in a collective for the
        # slowest rank (rank 0 evaluating, or a stopped peer) only delays the exit.
        transport.close(timeout=10.0, graceful=False)


def _run_collective(p: Plan, rank: int) -> Optional[dict]:
    """Data-parallel recipes: one default process group (gloo on CPU, nccl on CUDA), no rpc."""
    import datetime

    import torch.distributed as dist

    from distrl.nn.models import resolve_device

    backend = "nccl" if resolve_device(p.cfg.run.device).type == "cuda" else "gloo"
    if backend == "nccl":  # one GPU per rank, chosen before NCCL binds its communicator to a device
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=p.cfg.transport.init_timeout_s))
    try:
        role = p.recipe.builders[p.roles[rank]](RoleContext(p.cfg, None, rank, p.roles, p.run_dir, p.recipe, p.env))
        return role.run()
    finally:
        dist.destroy_process_group()
