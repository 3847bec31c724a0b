"""Sample Factory's policy worker: batches the env groups whose observations are ready, writes
their actions into shared memory, stamps the policy version.

A rollout worker's request names a slot and a step (16 bytes through its doorbell,
``distrl/recipes/sf/doorbell.py``); the observations are already in ``traj.observation[slot, :, t]``.
SEED's :class:`~distrl.roles.batcher.DynamicBatcher` batches them (the same batching policy:
a batch closes at ``algo.max_batch_envs`` observations or ``algo.max_wait_ms`` after its first
request arrived), pulling the records from the doorbell itself when its queue is empty: one
thread, no hand-over per request. This role's loop gathers a batch's
observations from shared memory, runs one forward pass (in numpy where the policy is a plain MLP:
``distrl/nn/numpy_policy.py``; a Gaussian policy, or one with observation normalisation, samples
through its head, :mod:`distrl.nn.heads`), writes ``action`` (int64 ``[B]`` or float32 ``[B, A]`` per
request), ``action_log_prob`` and ``policy_version`` back and rings each worker's reply bell.

Parameters come from the learner through shared memory (``sf_slots.read_params``, a seqlock):
checked before each batch, copied only when the learner published new ones. The vector is
``parameters_to_vector(model.parameters())``, so it carries the observation-normalisation
statistics too (frozen parameters: ``distrl/nn/obs_norm.py``).
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.runtime.affinity import pin_rank
from distrl.runtime.context import RoleContext
from distrl.data import keys, shm
from distrl.envs.gym import env_info
from distrl.logging.timing import TimeBudget
from distrl.nn.models import ActorCritic
from distrl.nn.numpy_policy import NumpyPolicy
from distrl.recipes.sf import doorbell as bell
from distrl.roles.batcher import DynamicBatcher, InferenceStats
from distrl.recipes.sf.slots import STOP as STOP_FLAG, read_params
from distrl.transport.base import TransportError

STATS_INTERVAL_S = 2.0


@dataclass(eq=False)
class SlotRequest:
    """One env group's step awaiting actions: ``size`` observations at ``traj[slot, :, t]``."""

    rank: int
    group: int
    slot: int
    t: int
    size: int
    arrived: float = field(default_factory=time.monotonic)


def inference_rank_of(ctx: RoleContext, worker: int) -> int:
    """The inference rank that serves rollout worker ``worker``: workers are dealt out in turn."""
    workers, servers = ctx.ranks_of("rollout_worker"), ctx.ranks_of("inference")
    return servers[workers.index(worker) % len(servers)]


class SFInference:
    """Ranks ``1..algo.inference_ranks`` of ``sf``; see the module docstring."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg, self.algo = ctx, ctx.cfg, ctx.cfg.algo
        pin_rank(False, self.algo.learner_cores)  # off the learner's core(s), before any thread of its own
        self.learner = ctx.ranks_of("learner")[0]
        info = env_info(self.cfg.run.env)
        self.model = ActorCritic.for_env(info, self.cfg.net)
        self.flat = torch.nn.utils.parameters_to_vector(self.model.parameters()).detach().clone()
        torch.nn.utils.vector_to_parameters(self.flat, self.model.parameters())  # views of flat from here on
        self.staging = self.flat.clone()  # read_params copies here: a torn copy never reaches the policy
        self.fast = (
            NumpyPolicy(self.model.policy, self.cfg.run.seed + ctx.rank)
            if NumpyPolicy.supports(self.model.policy)
            else None
        )
        self.served = [w for w in ctx.ranks_of("rollout_worker") if inference_rank_of(ctx, w) == ctx.rank]
        self.batcher = DynamicBatcher(
            self.algo.max_batch_envs,
            self.algo.max_wait_ms / 1e3,
            capacity=max(1, len(self.served)) * self.algo.groups_per_worker,
            pull=self._pull,
        )
        self.generator = torch.Generator().manual_seed(self.cfg.run.seed + ctx.rank)
        self.stats, self.budget = InferenceStats(), TimeBudget()
        self.shared: Optional[TensorDict] = None
        self.bell: Optional[bell.ServerBell] = None
        self.seq, self.version = 0, 0

    # ---- the doorbell: request records into the batcher ---------------------------------------------
    def _pull(self, timeout_s: float) -> None:
        """Waits up to ``timeout_s`` for doorbell records and enqueues each well-formed one (the
        batcher calls it when its queue is empty); a malformed one is refused at once."""
        slots, T = self.shared[keys.TRAJ].shape[0], self.algo.unroll_length
        for rank, group, slot, t in self.bell.requests(timeout_s):
            well_formed = (
                rank in self.served and 0 <= group < self.algo.groups_per_worker and 0 <= slot < slots and 0 <= t < T
            )
            if not (well_formed and self._enqueue(SlotRequest(rank, group, slot, t, self.algo.envs_per_group))):
                self.bell.answer(rank, group, bell.ERROR)  # the worker exits, saying why

    def _enqueue(self, req: SlotRequest) -> bool:
        """False when more requests are in flight than env groups (a protocol bug)."""
        try:
            self.batcher.put(req)
            return True
        except queue.Full:
            return False

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        t = self.ctx.transport
        timeout = self.cfg.transport.call_timeout_s
        me = TensorDict({keys.WORKER_RANK: torch.tensor(self.ctx.rank)})
        try:
            reply = t.call_sync(self.learner, "hello", me, timeout)
            if bool(reply[keys.STOP]):
                return
            path = shm.decode_path(reply[keys.SHM_PATH])
            self.shared = shm.attach(path)
            self.bell = bell.ServerBell(path, self.ctx.rank, self.served, bell.ACT)  # before "attached": then they go
            t.call_sync(self.learner, "attached", me, timeout)
            self._loop()
        except TransportError as e:
            print(f"[inference {self.ctx.rank}] learner unreachable, exiting: {e}", flush=True)
        finally:
            if self.bell is not None:
                self._answer(self.batcher.drain(), bell.STOP)
        try:  # the run's totals and time budget, and a goodbye so the learner need not wait for this rank
            self._send_stats(final=True)
            bye = TensorDict({**self._stats_td(self.stats.summary()), keys.WORKER_RANK: torch.tensor(self.ctx.rank)})
            t.call_sync(self.learner, "bye", bye, timeout)
        except (TransportError, TimeoutError):
            pass
        if self.bell is not None:
            self.bell.close()

    def _loop(self) -> None:
        stop, traj = self.shared[keys.CONTROL].numpy()[STOP_FLAG : STOP_FLAG + 1], self.shared[keys.TRAJ]
        # numpy views, taken once: a torch indexed read or write costs 3.5 us, numpy's under 1 us
        traj = {
            key: traj[key].numpy() for key in (keys.OBSERVATION, keys.ACTION, keys.ACTION_LOG_PROB, keys.POLICY_VERSION)
        }
        last_stats, turns = time.monotonic(), 0
        with torch.no_grad():
            while not stop[0]:
                turns += 1
                faults.maybe_signal(self.ctx.rank, turns)  # fault injection (distrl/runtime/faults.py)
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
        got = read_params(self.shared, self.seq, self.staging)
        if got is not None:  # in place: the parameters (and the numpy policy's views) are views of flat
            self.flat.copy_(self.staging)
            self.seq, self.version = got

    def _serve(self, batch: list[SlotRequest], traj: dict[str, np.ndarray]) -> None:
        """Gather ``[N, *F]`` observations from the slots, one forward, write actions back, answer."""
        start = time.monotonic()
        obs = torch.from_numpy(np.concatenate([traj[keys.OBSERVATION][r.slot, :, r.t] for r in batch]))
        if self.fast is not None:
            action, log_prob = self.fast.act(obs)
        else:
            action, log_prob = self.model.head.sample(self.model.policy(obs), self.generator)
        action, log_prob = action.numpy(), log_prob.numpy()
        offset = 0
        for r in batch:
            rows = slice(offset, offset + r.size)
            traj[keys.ACTION][r.slot, :, r.t], traj[keys.ACTION_LOG_PROB][r.slot, :, r.t] = action[rows], log_prob[rows]
            traj[keys.POLICY_VERSION][r.slot, :, r.t] = self.version
            offset += r.size
        self._answer(batch)
        done = time.monotonic()
        self.stats.add_batch(len(batch), offset, [done - r.arrived for r in batch], done - start)

    def _answer(self, batch: list[SlotRequest], status: int = bell.OK) -> None:
        for r in batch:
            self.bell.answer(r.rank, r.group, status)

    @staticmethod
    def _stats_td(stats: dict) -> TensorDict:
        return TensorDict({k: torch.tensor(float(v), dtype=torch.float64) for k, v in stats.items() if v is not None})

    def _send_stats(self, final: bool = False) -> None:
        """``inference/*`` window means to the learner (it logs them), and this loop's time budget;
        ``final``: both now, waiting for them (a short run may end between two periodic sends)."""
        t, window, sent = self.ctx.transport, self.stats.window(), []
        if window:
            td = self._stats_td({k.split("/", 1)[1]: v for k, v in window.items()})
            sent.append(t.call(self.learner, "inference_stats", td, STATS_INTERVAL_S * 5))
        if not final:
            self.budget.maybe_send(t, self.learner, self.ctx.rank, interval_s=STATS_INTERVAL_S)
            return
        sent.append(self.budget.send(t, self.learner, self.ctx.rank, STATS_INTERVAL_S * 5))
        for call in sent:
            call.result(STATS_INTERVAL_S * 5)
