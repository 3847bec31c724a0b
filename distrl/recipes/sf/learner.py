"""The Sample Factory learner: owns the shared memory and the slot pool, trains APPO on the slots
workers hand in, publishes parameters into shared memory.

Life of the shared memory: created here (``__init__``), mapped by every other rank after its
``hello``; once every rank has said ``attached`` (or was lost) the files are unlinked, so from then
on nothing can be left behind whatever happens to any process (``distrl/data/shm.py``).

Handlers (transport threads, never blocking): ``hello`` (the path), ``attached`` (a worker's first
slots, one and a spare per group, reserved for it when the pool is made: a late worker finds them
still there), ``inference_stats`` and ``bye``. Full slots come in through the
learner's doorbell (``SLOT`` channel, ``distrl/recipes/sf/doorbell.py``), read by the loop itself
whenever it needs rows: it copies the oldest handed-in slot out, frees it, answers each worker
owed a spare as slots come free, drops rows older than ``algo.max_policy_lag`` updates
(counted in ``frames_dropped``, never in the frames and rates: those are the rows trained on), and
takes one APPO step per ``algo.batch_size`` rows. A handed-in slot waits for the
loop; its worker needs the spare only ``T`` steps later, so it waits only when the learner is
behind: the backpressure.

Continuous actions (a Gaussian head, :mod:`distrl.nn.heads`): the slots hold float32 ``[A]`` actions,
and the network's :class:`~distrl.nn.obs_norm.ObsNorm` statistics are merged here from every worker's
rows (each trained batch folded in after its step) and reach inference inside the published
parameter vector, with the weights of the same version.
"""

from __future__ import annotations

import collections
import os
import threading
from typing import Optional

import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.runtime.affinity import pin_rank
from distrl.algorithms.appo import appo_loss, appo_sample_loss, batch_gae
from distrl.algorithms.ppo import minibatches
from distrl.data import keys, shm
from distrl.data.trajectory import finite_rows
from distrl.data.wire import WireMeter, payload_nbytes
from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic
from distrl.runtime.context import RoleContext
from distrl.recipes.sf import doorbell as doorbells
from distrl.recipes.sf.slots import STOP as STOP_FLAG, SlotPool, publish_params, rollout_layout
from distrl.roles.learner import Learner
from distrl.roles.rows import RowQueue


def drop_lagged(rows: TensorDict, updates: int, max_lag: int) -> tuple[TensorDict, int]:
    """Rows ``[N, T]`` whose oldest step is at most ``max_lag`` updates old, and the number of
    samples dropped. A row goes whole: V-trace and GAE need its steps in sequence."""
    lag = updates - rows[keys.POLICY_VERSION].min(dim=1).values  # [N]
    keep = lag <= max_lag
    if bool(keep.all()):
        return rows, 0
    return rows[keep], int((~keep).sum()) * rows.shape[1]


class SFLearner(Learner):
    """Rank 0 of ``sf``."""

    def __init__(self, ctx: RoleContext):
        run, algo = ctx.cfg.run, ctx.cfg.algo
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # its own process: a conv backward may use idle cores
            torch.set_num_threads(max(run.torch_threads, algo.learner_threads))
        cores = pin_rank(True, algo.learner_cores)
        if cores:
            print(f"[learner] on core(s) {cores}, every other rank on the rest (algo.learner_cores)", flush=True)
        super().__init__(ctx)
        info = env_info(run.env)
        model = ActorCritic.for_env(info, self.cfg.net).to(self.device)
        self.setup(model, torch.optim.Adam(model.parameters(), lr=algo.lr, eps=1e-5, fused=True))
        self.workers = ctx.ranks_of("rollout_worker")
        self.others = set(ctx.roles) - {ctx.rank}
        num_slots = max(1, len(self.workers)) * self.algo.groups_per_worker * self.algo.slots_per_group
        self.pool = SlotPool(num_slots)
        G = self.algo.groups_per_worker
        #: rank -> [G, 2] (slot, spare): reserved now, so that no worker attaching late finds them taken
        self.first_slots = {w: torch.tensor(self.pool.reserve(w, 2 * G)).view(G, 2) for w in self.workers}
        layout = rollout_layout(
            num_slots,
            self.algo.envs_per_group,
            self.algo.unroll_length,
            info.shape,
            sum(p.numel() for p in self.model.parameters()),
            len(ctx.roles),
            info.obs_dtype or torch.float32,
            self.model.head.action_shape,
            self.model.head.action_dtype,
        )
        self.shared, self.shm_path = shm.create(layout, "sf")
        doorbells.make(self.shm_path, ctx.rank, ctx.ranks_of("inference"), self.workers)  # unlinked with the rest
        self.bell = doorbells.ServerBell(self.shm_path, ctx.rank, self.workers, doorbells.SLOT)
        self.traj, self.control, self.evicted = (
            self.shared[keys.TRAJ],
            self.shared[keys.CONTROL],
            self.shared[keys.EVICTED],
        )
        self.publish()
        self.handed: collections.deque[int] = collections.deque()  # slots handed in, not yet copied out
        self.owed: collections.deque[tuple[int, int]] = collections.deque()  # (rank, group) owed a spare
        self.spares_late = 0  # hand-ins read while no slot was free for the spare
        self.hand_ins_refused = 0  # hand-ins of evicted ranks: their slots are retired, the rows dropped
        self.attached: set[int] = set()
        self.said_bye: set[int] = set()
        self.env_errors: dict[int, int] = {}  # each rollout worker's env failures, from its goodbye
        self.inference_summary: dict[int, dict] = {}
        self._unlinked = False
        self._lock = threading.Lock()
        self.rows = RowQueue()  # rows within the lag cap, not yet trained on
        # What crosses rpc: these handlers' requests and replies, none of them per env step
        # (trajectories, actions and parameters go through shared memory); summary.json's bytes_per_env_step
        self.wire = WireMeter()
        for name, handler in (
            ("hello", self._hello),
            ("attached", self._attached),
            ("inference_stats", self._inference_stats),
            ("bye", self._bye),
        ):
            ctx.transport.serve(name, self._metered(handler))

    def _metered(self, handler):
        def serve(td: TensorDict) -> TensorDict:
            reply = handler(td)
            self.wire.add(payload_nbytes(td) + payload_nbytes(reply), 0)
            return reply

        return serve

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
        slots = self.first_slots[rank]
        if self.evicted[rank]:  # declared lost before it attached: its slots are retired, it must leave
            slots = torch.full_like(slots, -1)
        return TensorDict({keys.SLOT: slots})

    def _inference_stats(self, td: TensorDict) -> TensorDict:
        self.tracker.observe({f"inference/{k}": float(v) for k, v in td.items()})
        return TensorDict()

    def _bye(self, td: TensorDict) -> TensorDict:
        rank = int(td[keys.WORKER_RANK])
        stats = {k: float(v) for k, v in td.items() if k not in (keys.WORKER_RANK, keys.ENV_ERRORS)}
        with self._lock:
            self.said_bye.add(rank)
            if stats:
                self.inference_summary[rank] = stats
            if keys.ENV_ERRORS in td.keys():  # a rollout worker's env failures over its run
                self.env_errors[rank] = int(td[keys.ENV_ERRORS])
                if any(self.env_errors.values()):
                    self.tracker.set_count("env_errors", sum(self.env_errors.values()))
        return TensorDict()

    # ---- shared memory ----------------------------------------------------------------------------
    def _stopping(self) -> bool:
        return self.session.stopping.is_set()

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

    def publish(self) -> None:
        flat = torch.nn.utils.parameters_to_vector(self.model.parameters()).detach().cpu()
        publish_params(self.shared, flat, self.tracker.updates)

    # ---- the loop -----------------------------------------------------------------------------------
    def _read_hand_ins(self, timeout_s: float) -> None:
        """Take the hand-ins the doorbell holds (waiting up to ``timeout_s`` for one) and answer
        the workers owed a spare while slots are free."""
        new = 0
        for rank, group, slot, _ in self.bell.requests(timeout_s):
            if self.evicted[rank]:  # sent before it was declared lost (or after, stopped and continued)
                self.hand_ins_refused += 1  # its slots are retired: the rows may be partly stale
                continue
            self.pool.hand_in(rank, slot)  # a SlotError is a protocol bug: it ends the run, loudly
            self.handed.append(slot)
            self.owed.append((rank, group))
            new += 1
        self._give_spares()
        self.spares_late += min(new, len(self.owed))  # answered later, when a slot comes free

    def _give_spares(self) -> None:
        while self.owed:
            rank, group = self.owed[0]
            if not self.evicted[rank]:
                slot = self.pool.acquire(rank)
                if slot < 0:
                    return
                self.bell.answer(rank, group, slot)
            self.owed.popleft()

    def _no_more_spares(self) -> None:
        """At the stop: every group owed a spare hears "none" (-1) and its worker leaves now, not
        at its next look at the stop flag (a wait polls it twice a second)."""
        self._read_hand_ins(0.0)
        while self.owed:
            self.bell.answer(*self.owed.popleft(), -1)

    def _take_slot(self) -> bool:
        """Copy the oldest handed-in slot out of shared memory and free it; False if none came
        within 0.2 s."""
        for rank in self.ctx.transport.lost_peers():
            self.evicted[rank] = 1  # first: a stopped worker that comes back must not write
            # retired, not freed: a worker stopped between its check of the flag and its write
            # writes once more when continued, into a slot that must then be nobody else's
            if self.pool.reclaim(rank, reuse=False):
                self.tracker.set_count("slots_reclaimed", self.pool.reclaimed)
        self._maybe_unlink()
        self._read_hand_ins(0.0 if self.handed else 0.2)
        if not self.handed:
            return False
        rows = self._copy_out(self.handed.popleft())
        self._give_spares()
        finite = finite_rows(rows)
        if not finite.all():  # a NaN reward or observation: never trained on, never in the statistics
            bad = int((~finite).sum())
            if self.tracker.count("rejected_nonfinite_rows", bad) == bad:
                print(
                    f"[learner] rejected {bad} rows holding a NaN or inf (counted: rejected_nonfinite_rows)", flush=True
                )
            rows = rows[finite]
        self.tracker.add_episodes(rows[keys.NEXT, keys.EPISODE_RETURN][rows[keys.DONE]].tolist())
        self.rows.add(self._within_lag(rows))
        return True

    def next_batch(self) -> Optional[TensorDict]:
        """``algo.batch_size`` rows within the lag cap: rows are checked as they arrive and again
        when the batch is cut (rows left over from the last batch have aged); older ones are
        dropped and counted. The frames counted are the batch's: what the update trains on."""
        while len(self.rows) < self.algo.batch_size:
            if not self._take_slot() and self.session.should_stop():
                return None
        batch = self._within_lag(self.rows.take(self.algo.batch_size))
        if not batch.shape[0]:
            return None
        self.tracker.add_frames(batch.numel())
        return batch.to(self.device, non_blocking=True)

    def _within_lag(self, rows: TensorDict) -> TensorDict:
        kept, dropped = drop_lagged(rows, self.tracker.updates, self.algo.max_policy_lag)
        if dropped:  # samples are frames: a row is T env steps of one env
            self.tracker.count("samples_dropped_for_lag", dropped)
            self.tracker.drop_frames(dropped)
        return kept

    def update(self, batch: TensorDict) -> None:
        """``algo.num_epochs`` passes over the batch, each ``algo.num_minibatches`` steps on a shuffled
        share of its rows (whole rows: GAE and V-trace need the steps in order; with
        ``algo.minibatch=samples``, of its samples, their GAE taken once first); the defaults, one
        step per batch, are APPO's. Several passes spend a learner that would otherwise wait for
        rows (MuJoCo: a step of a (64, 64) MLP costs ~3 ms, a batch takes ~100 ms to arrive) on
        more improvement per sample; every step counts as an update, so the lag counts them too."""
        tracker, a = self.tracker, self.algo
        tracker.add_lag(tracker.updates - batch[keys.POLICY_VERSION])
        last = None  # (loss terms, gradient norm) of the last step taken
        samples = a.minibatch == "samples"
        data, loss = (batch_gae(self.model, batch, a), appo_sample_loss) if samples else (batch, appo_loss)
        if samples and self.model.value_norm is not None:  # net.value_norm: these targets, then their steps
            self.model.value_norm.update_batch(data[keys.VALUE_TARGET].unsqueeze(-1))  # (Sample Factory's order)
        for rows in minibatches(data, a.num_epochs, a.num_minibatches):
            faults.maybe_signal(self.ctx.rank, tracker.updates)
            out = loss(self.model, rows, a)
            grad_norm = self.apply_loss(out[keys.LOSS])
            if grad_norm is not None:
                last = out, grad_norm
        if last is not None:  # the statistics folded in after the last step, then one publish
            self.learned(*last, batch[keys.OBSERVATION], **{"learner/slots_free": self.pool.free_count()})

    # ---- around the loop (distrl/roles/learner.py) -------------------------------------------------
    def stopped(self) -> None:
        self.control[STOP_FLAG] = 1  # session.stopping, mirrored where every other rank reads it
        self._no_more_spares()

    def wind_down(self) -> None:
        self.session.peers.await_peers(lambda: self.others - self.said_bye, heartbeat=True)

    def close(self) -> None:
        self.control[STOP_FLAG] = 1
        self._maybe_unlink(force=True)
        self.bell.close()

    def summary_extra(self) -> dict:
        out = {
            "slots": len(self.pool.owner),
            "slots_reclaimed": self.pool.reclaimed,
            "slot_waits": self.spares_late,
            "hand_ins_refused": self.hand_ins_refused,
            "samples_dropped_for_lag": self.tracker.counters["samples_dropped_for_lag"],
            "bytes_per_env_step": round(self.wire.bytes / max(self.tracker.env_frames, 1), 4),
        }
        per_rank = list(self.inference_summary.values())
        for k in (
            "inference_batch_fill_mean",
            "inference_batch_envs_mean",
            "inference_latency_ms_mean",
            "inference_latency_ms_p95",
            "inference_compute_ms_mean",
            "inference_batches",
        ):
            vals = [s[k] for s in per_rank if k in s]
            out[k] = round(sum(vals) / len(vals), 4) if vals else None
        return out
