"""The Sample Factory learner: owns the shared memory and the slot pool, trains APPO on the slots
workers hand in, publishes parameters into shared memory.

Life of the shared memory: created here (``__init__``), mapped by every other rank after its
``hello``; once every rank has said ``attached`` (or was lost) the files are unlinked, so from then
on nothing can be left behind whatever happens to any process (``distrl/data/shm.py``).

Handlers (transport threads, never blocking): ``hello`` (the path), ``attached`` (a worker's first
slots), ``acquire`` (a free slot or -1), ``hand_in`` (a full slot into the bounded queue, a new
spare back; the slot is copied out and freed there while less than a batch waits),
``inference_stats`` and ``bye``. The loop takes the copied rows, or copies a full slot out and
frees it, drops rows older than ``algo.max_policy_lag`` updates (counted), and takes one APPO
step per ``algo.batch_size`` rows.
"""
from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Optional

import torch
from tensordict import TensorDict

from distrl import faults
from distrl.algorithms.appo import appo_loss
from distrl.architectures.base import RoleContext
from distrl.data import keys, shm
from distrl.envs.gym import env_info, evaluate
from distrl.models import ActorCritic, clip_towers
from distrl.roles import sf_doorbell as doorbells
from distrl.roles.session import LearnerSession
from distrl.roles.sf_slots import STOP as STOP_FLAG, SlotPool, publish_params, rollout_layout


def drop_lagged(rows: TensorDict, updates: int, max_lag: int) -> tuple[TensorDict, int]:
    """Rows ``[N, T]`` whose oldest step is at most ``max_lag`` updates old, and the number of
    samples dropped. A row goes whole: V-trace and GAE need its steps in sequence."""
    lag = updates - rows[keys.POLICY_VERSION].min(dim=1).values  # [N]
    keep = lag <= max_lag
    if bool(keep.all()):
        return rows, 0
    return rows[keep], int((~keep).sum()) * rows.shape[1]


class SFLearner:
    """Rank 0 of ``sf``."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg, self.algo = ctx, ctx.cfg, ctx.cfg.algo
        self.session = LearnerSession(ctx)
        self.device = self.session.device
        info = env_info(self.cfg.run.env)
        self.model = ActorCritic(info.obs_dim, info.num_actions, self.cfg.net).to(self.device)
        self.optim = torch.optim.Adam(self.model.parameters(), lr=self.algo.lr, eps=1e-5, fused=True)
        self.session.restore(self.model, self.optim)
        self.session.evaluate = self._evaluate
        self.workers = ctx.ranks_of("rollout_worker")
        self.others = set(ctx.roles) - {ctx.rank}
        num_slots = max(1, len(self.workers)) * self.algo.groups_per_worker * self.algo.slots_per_group
        self.pool = SlotPool(num_slots)
        layout = rollout_layout(num_slots, self.algo.envs_per_group, self.algo.unroll_length, info.obs_dim,
                                sum(p.numel() for p in self.model.parameters()), len(ctx.roles))
        self.shared, self.shm_path = shm.create(layout, "sf")
        doorbells.make(self.shm_path, ctx.ranks_of("inference"), self.workers)  # unlinked with the rest
        self.traj, self.control = self.shared["traj"], self.shared["control"]
        self._publish()
        # full slots, and rows copied out of slots (_hand_in): at most num_slots of the one and
        # batch_size / envs_per_group + 1 of the other, so never full
        self.full: queue.Queue = queue.Queue(maxsize=num_slots + self.algo.batch_size // self.algo.envs_per_group + 1)
        self._copied_rows = 0  # rows in self.full copied out of their slot
        self.attached: set[int] = set()
        self.said_bye: set[int] = set()
        self.inference_summary: dict[int, dict] = {}
        self._unlinked = False
        self._lock = threading.Lock()
        self._rows: list[TensorDict] = []
        for name in ("hello", "attached", "acquire", "hand_in", "inference_stats", "bye"):
            ctx.transport.serve(name, getattr(self, f"_{name}"))

    # ---- handlers --------------------------------------------------------------------------------
    def _hello(self, td: TensorDict) -> TensorDict:
        return TensorDict({keys.SHM_PATH: shm.encode_path(self.shm_path), keys.STOP: torch.tensor(self._stopping())})

    def _attached(self, td: TensorDict) -> TensorDict:
        rank = int(td[keys.WORKER_RANK])
        with self._lock:
            self.attached.add(rank)
        self._maybe_unlink()
        if self.ctx.roles[rank] != "rollout_worker":
            return TensorDict()
        slots = [[self.pool.acquire(rank), self.pool.acquire(rank)] for _ in range(self.algo.groups_per_worker)]
        return TensorDict({keys.SLOT: torch.tensor(slots)})

    def _acquire(self, td: TensorDict) -> TensorDict:
        return TensorDict({keys.SLOT: torch.tensor(self.pool.acquire(int(td[keys.WORKER_RANK])))})

    def _hand_in(self, td: TensorDict) -> TensorDict:
        """A full slot in; the worker's next spare (or -1) back. While fewer than a batch of rows
        are waiting for the loop, the slot is copied out and freed here, so the spare is there at
        once: otherwise every slot is a worker's (filling or spare) until the loop next needs rows,
        and the worker stalls on ``acquire`` though the learner is idle (12% of a worker's time,
        ``rollout_worker/time_handoff``). Past that the slot waits in the queue: the backpressure."""
        rank, slot = int(td[keys.WORKER_RANK]), int(td[keys.SLOT])
        self.pool.hand_in(rank, slot)  # a SlotError goes back to the worker as a remote error
        returns = td[keys.EPISODE_RETURNS].tolist()
        with self._lock:
            copy_now = self._copied_rows < self.algo.batch_size
            self._copied_rows += self.algo.envs_per_group if copy_now else 0
        if copy_now:
            self.full.put_nowait((self._copy_out(slot), returns))
        else:
            self.full.put_nowait((slot, returns))
        return TensorDict({keys.SLOT: torch.tensor(self.pool.acquire(rank))})

    def _inference_stats(self, td: TensorDict) -> TensorDict:
        self.session.tracker.observe({f"inference/{k}": float(v) for k, v in td.items()})
        return TensorDict()

    def _bye(self, td: TensorDict) -> TensorDict:
        rank = int(td[keys.WORKER_RANK])
        stats = {k: float(v) for k, v in td.items() if k != keys.WORKER_RANK}
        with self._lock:
            self.said_bye.add(rank)
            if stats:
                self.inference_summary[rank] = stats
        return TensorDict()

    # ---- shared memory ----------------------------------------------------------------------------
    def _stopping(self) -> bool:
        return bool(self.control[STOP_FLAG])

    def _maybe_unlink(self, force: bool = False) -> None:
        with self._lock:
            if self._unlinked or not (force or self.others <= self.attached | self.ctx.transport.lost_peers()):
                return
            self._unlinked = True
        shm.unlink(self.shm_path)

    def _copy_out(self, slot: int) -> TensorDict:
        """A full slot's rows ``[B, T]``, copied: the slot is free again once this returns."""
        rows = self.traj[slot].clone()
        self.pool.release(slot)
        return rows

    def _publish(self) -> None:
        flat = torch.nn.utils.parameters_to_vector(self.model.parameters()).detach().cpu()
        publish_params(self.shared, flat, self.session.tracker.updates)

    # ---- the loop -----------------------------------------------------------------------------------
    def _take_slot(self) -> bool:
        """Copy one full slot out of shared memory and free it; False if none came in time."""
        for rank in self.ctx.transport.lost_peers():
            self.shared["evicted"][rank] = 1  # first: a stopped worker that comes back must not write
            if self.pool.reclaim(rank):
                self.session.tracker.counters["slots_reclaimed"] = self.pool.reclaimed
        self._maybe_unlink()
        try:
            item, returns = self.full.get(timeout=0.2)
        except queue.Empty:
            return False
        if isinstance(item, int):  # a slot: copy it out and free it now
            rows = self._copy_out(item)
        else:  # rows the hand-in copied out already
            rows = item
            with self._lock:
                self._copied_rows -= rows.shape[0]
        tracker = self.session.tracker
        tracker.add_episodes(returns)
        tracker.add_frames(rows.numel())
        rows = self._within_lag(rows)
        if rows.shape[0]:
            self._rows.append(rows)
        return True

    def _next_batch(self) -> Optional[TensorDict]:
        """``algo.batch_size`` rows within the lag cap: rows are checked as they arrive and again
        when the batch is cut (rows left over from the last batch have aged); older ones are
        dropped and counted."""
        while sum(r.shape[0] for r in self._rows) < self.algo.batch_size:
            if not self._take_slot() and self.session.should_stop():
                return None
        rows = torch.cat(self._rows)
        batch, rest = rows[: self.algo.batch_size], rows[self.algo.batch_size:]
        self._rows = [rest] if rest.shape[0] else []
        batch = self._within_lag(batch)
        return batch.to(self.device, non_blocking=True) if batch.shape[0] else None

    def _within_lag(self, rows: TensorDict) -> TensorDict:
        kept, dropped = drop_lagged(rows, self.session.tracker.updates, self.algo.max_policy_lag)
        if dropped:
            self.session.tracker.counters["samples_dropped_for_lag"] += dropped
        return kept

    def _update(self, batch: TensorDict) -> None:
        tracker, a = self.session.tracker, self.algo
        tracker.add_lag(tracker.updates - batch[keys.POLICY_VERSION])
        faults.maybe_signal(self.ctx.rank, tracker.updates)
        out = appo_loss(self.model, batch, a)
        if not self.session.loss_is_finite(out["loss"]):
            return
        self.optim.zero_grad(set_to_none=True)
        out["loss"].backward()
        grad_norm = clip_towers(self.model.tower_parameters(), a.max_grad_norm)
        self.optim.step()
        tracker.updates += 1
        self._publish()
        tracker.observe({f"learner/{k}": float(v.detach()) for k, v in out.items()}
                        | {"learner/grad_norm": float(grad_norm), "learner/slots_free": self.pool.owner.count(SlotPool.FREE)})

    def run(self) -> dict:
        session = self.session
        try:
            reason = session.train(self._next_batch, self._update, self.model, self.optim)
            self.control[STOP_FLAG] = 1  # every other rank reads it in its loop
            eval_returns = self._evaluate()
            self._await_byes()
        finally:
            self.control[STOP_FLAG] = 1
            self._maybe_unlink(force=True)
        extra = self._summary_extra()
        return session.finish(reason, eval_returns, self.model, self.optim, extra)

    def _summary_extra(self) -> dict:
        out = {"slots": len(self.pool.owner), "slots_reclaimed": self.pool.reclaimed,
               "slot_waits": self.pool.refused,
               "samples_dropped_for_lag": self.session.tracker.counters["samples_dropped_for_lag"]}
        per_rank = list(self.inference_summary.values())
        for k in ("inference_batch_fill_mean", "inference_batch_envs_mean", "inference_latency_ms_mean",
                  "inference_latency_ms_p95", "inference_compute_ms_mean", "inference_batches"):
            vals = [s[k] for s in per_rank if k in s]
            out[k] = round(sum(vals) / len(vals), 4) if vals else None
        return out

    def _evaluate(self) -> list[float]:
        """Greedy returns of ``run.eval_episodes`` episodes of the current policy."""
        return evaluate(lambda o: self.model.policy(o), self.cfg.run.env, self.cfg.run.eval_episodes,
                        self.cfg.run.seed + 10_000, self.device)

    def _await_byes(self) -> None:
        """Let every live rank see the stop flag and say goodbye, bounded by the call timeout."""
        deadline = time.monotonic() + self.cfg.transport.call_timeout_s
        while time.monotonic() < deadline and self.others - self.said_bye - self.ctx.transport.lost_peers():
            self.session.heartbeat()
            time.sleep(0.02)
