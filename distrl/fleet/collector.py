"""A distrl fleet behind TorchRL's collector surface, for a user's own loop: :class:`FleetCollector`.

    collector = FleetCollector(policy, env="CartPole-v1", frames_per_batch=2048, total_frames=500_000)
    for batch in collector:                    # [B, T] TensorDict with TorchRL's keys and "policy_version"
        ...                                    # e.g. GAE, then ClipPPOLoss on minibatches of it
        collector.update_policy_weights_()     # the policy's new weights go to every actor
    collector.shutdown()                       # or `with FleetCollector(...) as collector:`

The actors are ``impala``'s own ``ImpalaActor`` role, unchanged: each steps ``envs_per_actor``
gymnasium envs with a local copy of the policy network and sends one ``[B, T]`` trajectory per unroll
to rank 0. Here rank 0 is the collector in the user's process: it serves the learner's side of the
actor protocol (``hello``, ``put_trajectory``, ``time_budget``), keeps trajectories in a queue of
``queue_size`` messages, and answers each message with the newest weights pushed through
:meth:`FleetCollector.update_policy_weights_` (when the actor's are older) and, once the collector
shuts down, with ``stop``. So the weights reach an actor with its next message, without a call of
their own, and an actor never waits for the user's loop except when the queue is full.

``world_size=1``: the actors are threads of this process over the ``local`` transport.
``world_size=N > 1``: ``N - 1`` actor processes (spawned, each running the rank the way
``distrl train`` runs it) over the ``rpc`` transport, this process being rank 0.
"""

from __future__ import annotations

import atexit
import collections
import queue
import threading
import time
import weakref
from typing import Mapping, Optional

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from distrl.data import keys
from distrl.fleet.backends import LocalFleet, RpcFleet
from distrl.fleet.config import FleetConfig, fleet_policy, linear_layers
from distrl.nn.models import ActorCritic
from distrl.data.trajectory import receive_trajectory
from distrl.roles.board import ParameterBoard


_LIVE: "weakref.WeakSet[FleetCollector]" = weakref.WeakSet()


@atexit.register
def _shutdown_live() -> None:
    """A collector never shut down stops its actors at exit, not mid-step when the interpreter dies."""
    for collector in list(_LIVE):
        collector.shutdown()


class FleetCollector:
    """An iterable of ``[B, T]`` batches from distrl actors (module docstring).

    Args:
        policy: the TorchRL policy the user trains (e.g. a ``ProbabilisticActor``), whose network is
            an MLP of the actors' shape (``hidden``, ``activation``: ``obs_dim -> num_actions``
            logits); its weights are the first version the actors run. ``None``: the collector
            builds one over distrl's network (``collector.policy``).
        **kwargs: the fields of :class:`distrl.fleet.config.FleetConfig` (``env``, ``world_size``,
            ``frames_per_batch``, ``total_frames``, ``queue_size``...).

    Batches hold ``observation [B, T, F]``, ``action [B, T]`` (int64 indices),
    ``action_log_prob [B, T]`` (the acting policy's, TorchRL's default ``sample_log_prob`` key),
    ``policy_version [B, T]``, and ``("next", ...)``: ``observation [B, T, F]`` (the true final
    observation where an episode ended), ``reward``, ``done``, ``terminated``, ``truncated``
    ``[B, T, 1]``. Rows are whole unrolls of one env; ``B = frames_per_batch / unroll_length``.
    """

    def __init__(self, policy: Optional[nn.Module] = None, **kwargs):
        self.cfg = cfg = FleetConfig(**kwargs)
        self.frames_per_batch, self.total_frames = cfg.batch_frames, cfg.total_frames
        self.run_cfg = cfg.recipe_config()
        with torch.random.fork_rng():  # the actors' network, seeded without touching the user's RNG
            torch.manual_seed(cfg.seed)
            self._model = ActorCritic(cfg.obs_dim, cfg.num_actions, self.run_cfg.net)
        self._board = ParameterBoard(self._model)  # what the actors' next replies carry
        self.policy = policy if policy is not None else fleet_policy(self._model.policy, cfg.num_actions)
        self.policy_version = -1  #: updates pushed so far; batches carry the version that acted
        self.frames = 0  #: frames yielded so far
        self.episode_returns: collections.deque = collections.deque(maxlen=100)  #: the actors' last finished episodes
        self.counters = collections.Counter()  #: dropped_trajectories (queue full), rejected_trajectories
        self._queue: queue.Queue = queue.Queue(maxsize=cfg.queue_size)
        self._stopping = threading.Event()
        self._closed = False
        self.update_policy_weights_()  # version 0: what the actors' first message is collected with
        roles = {0: "learner", **{r: "actor" for r in range(1, cfg.actor_count + 1)}}
        fleet = LocalFleet if cfg.world_size == 1 else RpcFleet
        self._fleet = fleet(self.run_cfg, roles, cfg)
        t = self._fleet.transport
        t.serve("hello", lambda td: self._board.reply(-1, self._stopping.is_set()))
        t.serve("put_trajectory", self._put_trajectory)
        t.serve("time_budget", lambda td: None)  # the actors report their time; nothing here logs it
        t.serve("ping", lambda td: None)
        _LIVE.add(self)
        try:
            self._fleet.start()
        except BaseException:
            self.shutdown()
            raise

    # ---- the actors' side (transport threads: bounded waits only, never a call out) ------------
    def _put_trajectory(self, msg: TensorDict) -> TensorDict:
        if not self._stopping.is_set():
            traj, problem = receive_trajectory(msg[keys.TRAJ], (self.cfg.obs_dim,))  # actors send it packed
            if problem:
                self.counters["rejected_trajectories"] += 1
                print(f"[fleet] rejected a trajectory from rank {int(msg[keys.ACTOR_RANK])}: {problem}", flush=True)
            else:
                queued = msg.exclude(keys.TRAJ)
                queued[keys.TRAJ] = traj
                try:  # a full queue makes the actor wait with its message: the fleet's back-pressure
                    self._queue.put(queued, timeout=self.cfg.put_timeout_s)
                except queue.Full:
                    self.counters["dropped_trajectories"] += 1
        # every push reaches the actors (min_gap 1): the user's loop decides how often weights change
        return self._board.reply(int(msg[keys.PARAMS_VERSION]), self._stopping.is_set())

    # ---- the TorchRL collector surface -----------------------------------------------------------
    def update_policy_weights_(self, policy_or_weights: Optional[nn.Module | Mapping | TensorDictBase] = None) -> None:
        """Send new weights to every actor (each picks them up with its next message) and count a
        new policy version. ``None``: the weights of ``self.policy``; else a module whose network
        is the actors' MLP, or a state dict (or ``TensorDict``) of one, read in order."""
        src = self.policy if policy_or_weights is None else policy_or_weights
        if isinstance(src, nn.Module):
            weights = [t for layer in linear_layers(src, self._model.policy) for t in (layer.weight, layer.bias)]
        elif isinstance(src, (Mapping, TensorDictBase)):
            flat = src.flatten_keys(".") if isinstance(src, TensorDictBase) else src
            weights = [flat[k] for k in flat.keys()]
        else:
            raise TypeError(f"update_policy_weights_ takes a module, a state dict or None, not {type(src).__name__}")
        own = list(self._model.policy.state_dict().values())
        if [tuple(w.shape) for w in weights] != [tuple(w.shape) for w in own]:
            raise ValueError(
                f"the weights' shapes {[tuple(w.shape) for w in weights]} are not the actors' network's "
                f"{[tuple(w.shape) for w in own]} (hidden={self.cfg.hidden})"
            )
        with torch.no_grad():
            for mine, new in zip(own, weights):
                mine.copy_(new.detach())
        self.policy_version += 1
        self._board.publish(self.policy_version)

    def __iter__(self):
        if self._closed:
            raise RuntimeError("the FleetCollector is shut down; build a new one")
        per_batch = self.frames_per_batch // self.cfg.message_frames
        while self.total_frames < 0 or self.frames < self.total_frames:
            msgs = [self._next_message() for _ in range(per_batch)]
            for m in msgs:
                self.episode_returns.extend(m[keys.EPISODE_RETURNS].tolist())
            batch = torch.cat([m[keys.TRAJ] for m in msgs], dim=0) if per_batch > 1 else msgs[0][keys.TRAJ]
            self.frames += batch.numel()
            yield batch
        self.shutdown()  # the budget is spent: stop the actors now rather than when the user remembers

    def iterator(self):
        """TorchRL's name for ``iter(collector)``."""
        return iter(self)

    def __len__(self) -> int:
        if self.total_frames < 0:
            raise RuntimeError("an endless FleetCollector (total_frames=-1) has no length")
        return -(-self.total_frames // self.frames_per_batch)

    def _next_message(self) -> TensorDict:
        deadline = time.monotonic() + self.cfg.batch_timeout_s
        while True:
            try:
                return self._queue.get(timeout=0.2)
            except queue.Empty:
                problem = self._fleet.problem()
                if problem is None and time.monotonic() > deadline:
                    problem = f"no trajectory arrived in batch_timeout_s={self.cfg.batch_timeout_s:g}s"
                if problem:
                    self.shutdown()
                    raise RuntimeError(f"FleetCollector: {problem}")

    # ---- lifetime --------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Tell every actor to stop (in the reply to its next message), wait for them (bounded),
        and end their threads or processes and the transport. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        fleet = getattr(self, "_fleet", None)
        if fleet is not None:
            # Drain while waiting, so that actors blocked on a full queue get their stop reply.
            fleet.stop(drain=lambda: self._drain())

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    def __enter__(self) -> "FleetCollector":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __del__(self):
        if not getattr(self, "_closed", True):
            self.shutdown()

    def __repr__(self) -> str:
        c = self.cfg
        return (
            f"FleetCollector(env={c.env!r}, world_size={c.world_size}, actors={c.actor_count}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
            f"policy_version={self.policy_version}, frames={self.frames})"
        )
