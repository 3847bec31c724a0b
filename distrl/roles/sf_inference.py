"""Sample Factory's policy worker: batches the env groups whose observations are ready, writes
their actions into shared memory, stamps the policy version.

A rollout worker's ``infer`` call names a slot and a step (a few bytes); the observations are
already in ``traj.observation[slot, :, t]``. The handler enqueues the request in SEED's
:class:`~distrl.roles.seed_batching.DynamicBatcher` (the same batching policy: a batch closes at
``algo.max_batch_envs`` observations or ``algo.max_wait_ms`` after its first request arrived)
and waits on the request's own event, bounded by ``algo.request_timeout_s``; it never calls out.
This role's loop gathers a batch's observations from shared memory, runs one forward pass,
writes ``action``, ``action_log_prob`` and ``policy_version`` back and answers.

Parameters come from the learner through shared memory (``sf_slots.read_params``, a seqlock):
checked before each batch, copied only when the learner published new ones.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from tensordict import TensorDict

from distrl.architectures.base import RoleContext
from distrl.data import keys, shm
from distrl.envs.gym import env_info
from distrl.logging.timing import TimeBudget
from distrl.models import ActorCritic, sample_actions
from distrl.roles.seed_batching import DynamicBatcher, InferenceStats
from distrl.roles.sf_slots import STOP as STOP_FLAG, read_params
from distrl.transport.base import TransportError

STATS_INTERVAL_S = 2.0


@dataclass(eq=False)
class SlotRequest:
    """One env group's step awaiting actions: ``size`` observations at ``traj[slot, :, t]``."""

    rank: int
    slot: int
    t: int
    size: int
    arrived: float = field(default_factory=time.monotonic)
    stop: bool = False
    error: Optional[str] = None
    ready: threading.Event = field(default_factory=threading.Event)


def inference_rank_of(ctx: RoleContext, worker: int) -> int:
    """The inference rank that serves rollout worker ``worker``: workers are dealt out in turn."""
    workers, servers = ctx.ranks_of("rollout_worker"), ctx.ranks_of("inference")
    return servers[workers.index(worker) % len(servers)]


class SFInference:
    """Ranks ``1..algo.inference_ranks`` of ``sf``; see the module docstring."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg, self.algo = ctx, ctx.cfg, ctx.cfg.algo
        self.learner = ctx.ranks_of("learner")[0]
        info = env_info(self.cfg.run.env)
        self.model = ActorCritic(info.obs_dim, info.num_actions, self.cfg.net)
        self.flat = torch.nn.utils.parameters_to_vector(self.model.parameters()).detach().clone()
        served = [w for w in ctx.ranks_of("rollout_worker") if inference_rank_of(ctx, w) == ctx.rank]
        self.batcher = DynamicBatcher(self.algo.max_batch_envs, self.algo.max_wait_ms / 1e3,
                                      capacity=max(1, len(served)) * self.algo.groups_per_worker)
        self.generator = torch.Generator().manual_seed(self.cfg.run.seed + ctx.rank)
        self.stats, self.budget = InferenceStats(), TimeBudget()
        self.shared: Optional[TensorDict] = None
        self.stopping = threading.Event()
        self.seq, self.version = 0, 0
        ctx.transport.serve("infer", self.infer)

    # ---- handler (transport threads: enqueue, then a bounded wait on the request's own event) ----
    def infer(self, td: TensorDict) -> TensorDict:
        if self.stopping.is_set():
            return TensorDict({keys.STOP: torch.tensor(True)})
        req = SlotRequest(int(td[keys.WORKER_RANK]), int(td[keys.SLOT]), int(td[keys.SLOT_STEP]),
                          self.algo.envs_per_group)
        try:
            self.batcher.put(req)
        except queue.Full:
            raise ValueError("request rejected: more requests in flight than env groups") from None
        if not req.ready.wait(self.algo.request_timeout_s):
            raise TimeoutError(f"no inference reply within algo.request_timeout_s={self.algo.request_timeout_s}s")
        if req.error is not None:
            raise RuntimeError(f"inference failed: {req.error}")
        return TensorDict({keys.STOP: torch.tensor(req.stop)})

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        t = self.ctx.transport
        timeout = self.cfg.transport.call_timeout_s
        me = TensorDict({keys.WORKER_RANK: torch.tensor(self.ctx.rank)})
        try:
            reply = t.call_sync(self.learner, "hello", me, timeout)
            if bool(reply[keys.STOP]):
                return
            self.shared = shm.attach(shm.decode_path(reply[keys.SHM_PATH]))
            t.call_sync(self.learner, "attached", me, timeout)
            self._loop()
        except TransportError as e:
            print(f"[inference {self.ctx.rank}] learner unreachable, exiting: {e}", flush=True)
        finally:
            self.stopping.set()
            self._answer(self.batcher.drain(), stop=True)
        try:  # the run's totals, and a goodbye so the learner need not wait for this rank
            bye = TensorDict({**self._stats_td(self.stats.summary()), keys.WORKER_RANK: torch.tensor(self.ctx.rank)})
            t.call_sync(self.learner, "bye", bye, timeout)
        except TransportError:
            pass

    def _loop(self) -> None:
        control, traj = self.shared["control"], self.shared["traj"]
        last_stats = time.monotonic()
        with torch.no_grad():
            while not int(control[STOP_FLAG]):
                with self.budget("wait"):
                    batch = self.batcher.next_batch(idle_timeout_s=0.05)
                with self.budget("params"):
                    self._refresh_params()
                if batch:
                    with self.budget("forward"):
                        self._serve(batch, traj)
                if time.monotonic() - last_stats > STATS_INTERVAL_S:
                    last_stats = time.monotonic()
                    self._send_stats()

    def _refresh_params(self) -> None:
        got = read_params(self.shared, self.seq, self.flat)
        if got is not None:
            self.seq, self.version = got
            torch.nn.utils.vector_to_parameters(self.flat, self.model.parameters())

    def _serve(self, batch: list[SlotRequest], traj: TensorDict) -> None:
        """Gather ``[N, F]`` observations from the slots, one forward, write actions back, answer."""
        start = time.monotonic()
        obs_all = traj[keys.OBSERVATION]
        obs = torch.cat([obs_all[r.slot, :, r.t] for r in batch])
        action, log_prob = sample_actions(self.model.policy(obs), self.generator)
        act, logp, ver = traj[keys.ACTION], traj[keys.ACTION_LOG_PROB], traj[keys.POLICY_VERSION]
        offset = 0
        for r in batch:
            rows = slice(offset, offset + r.size)
            act[r.slot, :, r.t], logp[r.slot, :, r.t] = action[rows], log_prob[rows]
            ver[r.slot, :, r.t] = self.version
            offset += r.size
        self._answer(batch)
        done = time.monotonic()
        self.stats.add_batch(len(batch), offset, [done - r.arrived for r in batch], done - start)

    @staticmethod
    def _answer(batch: list[SlotRequest], stop: bool = False) -> None:
        for r in batch:
            r.stop = stop
            r.ready.set()

    @staticmethod
    def _stats_td(stats: dict) -> TensorDict:
        return TensorDict({k: torch.tensor(float(v), dtype=torch.float64) for k, v in stats.items() if v is not None})

    def _send_stats(self) -> None:
        """``inference/*`` window means to the learner (it logs them), and this loop's time budget."""
        window = self.stats.window()
        if window:
            td = self._stats_td({k.split("/", 1)[1]: v for k, v in window.items()})
            self.ctx.transport.call(self.learner, "inference_stats", td, STATS_INTERVAL_S * 5)
        self.budget.maybe_send(self.ctx.transport, self.learner, self.ctx.rank, interval_s=STATS_INTERVAL_S)
