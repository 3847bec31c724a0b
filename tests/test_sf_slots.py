"""Sample Factory's slot ownership: a worker is never given a negative or foreign slot (a late
worker finds its own slots reserved), a lost worker's slots are retired, never handed out again,
and a worker evicted while it was stopped writes nothing more when continued: unit tests of the
pool, the learner and the worker in one process, and a SIGSTOP/SIGCONT of a rollout worker under
torchrun (no shared-memory file or process left behind: checked after every test by conftest.py)."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from distrl.config import override
from distrl.data import keys
from distrl.logging.timing import TimeBudget
from distrl.recipes import get_recipe
from distrl.runtime.context import RoleContext
from distrl.recipes.sf import doorbell as bell
from distrl.recipes.sf.recipe import debug
from distrl.recipes.sf.slots import SlotError, SlotPool
from distrl.transport.local import LocalHub
from helpers import child_env, proc_state, read_summary, train_cmd


# ---------------------------------------------------------------- the pool


def test_reserved_slots_are_the_ranks_own_and_a_short_pool_says_so():
    pool = SlotPool(5)
    a, b = pool.reserve(2, 2), pool.reserve(3, 2)
    assert set(a).isdisjoint(b) and all(pool.owner[s] == 2 for s in a) and pool.free_count() == 1
    with pytest.raises(SlotError):
        pool.reserve(4, 2)  # one free: never a -1 among a worker's first slots
    assert pool.owner.count(SlotPool.FREE) == 1  # and nothing taken by the refusal


def test_a_lost_workers_slots_are_retired_and_never_handed_out_again():
    pool = SlotPool(4)
    lost, other = pool.reserve(5, 2), pool.reserve(6, 2)
    pool.hand_in(6, other[0])
    assert pool.reclaim(5, reuse=False) == lost and pool.reclaimed == 2
    assert all(pool.owner[s] == SlotPool.RETIRED for s in lost)
    with pytest.raises(SlotError):
        pool.hand_in(5, lost[0])  # continued after its eviction: the slot is nobody's now
    pool.release(other[0])
    assert pool.acquire(6) == other[0] and pool.acquire(6) == -1  # the retired ones stay out
    assert pool.free_count() == 0


# ---------------------------------------------------------------- the learner


def _learner(tmp_path, world: int = 4):
    from distrl.recipes.sf.learner import SFLearner

    cfg = override(debug(), **{"run.logger": "none"})  # 2 groups of 8 envs, 4 steps
    roles = dict(enumerate(get_recipe("sf").roles_for_config(world, cfg)))  # learner, inference, workers
    endpoint = LocalHub(world).endpoint(0)
    return SFLearner(RoleContext(cfg, endpoint, 0, roles, tmp_path)), endpoint, cfg


def _close(learner, *bells) -> None:
    for b in bells:
        b.close()
    learner.bell.close()
    learner._maybe_unlink(force=True)


def _me(rank: int) -> TensorDict:
    return TensorDict({keys.WORKER_RANK: torch.tensor(rank)})


def test_a_late_worker_gets_its_own_slots_though_another_took_spares_first(tmp_path):
    """Rank 2 runs ahead and hands in both groups' slots before rank 3 attaches: the learner owes
    it two spares. Before the fix the second spare was a free slot meant for rank 3, which then
    attached to a pool one short and was given slot -1 (index -1: another worker's slot)."""
    learner, _, cfg = _learner(tmp_path)
    worker = bell.WorkerBell(learner.shm_path, 0, 2, bell.SLOT)
    try:
        early = learner._attached(_me(2))[keys.SLOT]
        T = cfg.algo.unroll_length
        for g in range(cfg.algo.groups_per_worker):
            worker.ask(g, int(early[g, 0]), T)
        assert learner._take_slot()  # copies one out: one spare can be given, the other waits
        late = learner._attached(_me(3))[keys.SLOT]
        S = len(learner.pool.owner)
        assert late.shape == early.shape and bool(((late >= 0) & (late < S)).all()), late
        assert set(late.flatten().tolist()).isdisjoint(early.flatten().tolist())
        assert all(learner.pool.owner[s] == 3 for s in late.flatten().tolist())
    finally:
        _close(learner, worker)


def test_an_evicted_workers_hand_in_is_refused_and_its_slots_go_to_nobody(tmp_path):
    learner, endpoint, cfg = _learner(tmp_path)
    two = bell.WorkerBell(learner.shm_path, 0, 2, bell.SLOT)
    three = bell.WorkerBell(learner.shm_path, 0, 3, bell.SLOT)
    try:
        lost = set(learner._attached(_me(2))[keys.SLOT].flatten().tolist())
        mine = learner._attached(_me(3))[keys.SLOT]
        endpoint.mark_lost(2, "stopped")  # SIGSTOPped past the liveness check
        assert not learner._take_slot() and learner.evicted[2] == 1
        assert all(learner.pool.owner[s] == SlotPool.RETIRED for s in lost)
        assert learner._attached(_me(2))[keys.SLOT].eq(-1).all()  # attaching only now: told to leave
        T, never = cfg.algo.unroll_length, (lambda: False)
        two.ask(0, min(lost), T)  # continued: its late hand-in
        slot = int(mine[0, 0])
        for _ in range(6):  # rank 3 goes on; every spare it is given is a slot rank 2 never held
            three.ask(0, slot, T)
            assert learner._take_slot()
            slot = three.wait(0, 1.0, never)
            assert slot not in lost and learner.pool.owner[slot] == 3
        assert learner.hand_ins_refused == 1 and learner.summary_extra()["hand_ins_refused"] == 1
    finally:
        _close(learner, two, three)


# ---------------------------------------------------------------- the worker


class _Env:
    """A vector env of ``B`` envs whose ``step`` runs ``during`` first (the learner's eviction,
    while the worker was stopped inside its env step)."""

    def __init__(self, B: int, during=lambda: None):
        self.B, self.during = B, during

    def step(self, action):
        self.during()
        z = np.zeros(self.B, dtype=bool)
        return np.ones((self.B, 1), np.float32), np.ones(self.B), z, z, {}


def _worker(S: int = 4, B: int = 2, T: int = 3, rank: int = 2):
    """A rollout worker's state without its processes: numpy slots ``[S, B, T]``, one group on slot 1."""
    from distrl.recipes.sf.rollout_worker import SFRolloutWorker, _Group
    from distrl.roles.env_recovery import StepWatch

    w = SFRolloutWorker.__new__(SFRolloutWorker)
    w.ctx, w.algo = SimpleNamespace(rank=rank), SimpleNamespace(unroll_length=T, slot_timeout_s=1.0)
    w.recovery = SimpleNamespace(failures=0, succeeded=lambda: None)
    w.watch = StepWatch("test-env", 0.0, f"rollout_worker {rank}")  # no step bound
    w.budget, w.steps, w.num_slots = TimeBudget(), 1, S
    w.buf = {
        k: np.zeros((S, B, T, 1) if k in (keys.OBSERVATION, keys.NEXT_OBSERVATION) else (S, B, T))
        for k in (
            keys.OBSERVATION,
            keys.ACTION,
            keys.NEXT_OBSERVATION,
            keys.STEP_REWARD,
            keys.STEP_TERMINATED,
            keys.STEP_TRUNCATED,
            keys.STEP_DONE,
            keys.EPISODE_RETURN,
        )
    }
    w.stop_flag, w.evicted_flag = np.zeros(1, np.int64), np.zeros(rank + 2, np.int64)
    w.groups = [_Group(_Env(B), np.ones((B, 1), np.float32), 1, None)]
    return w


def test_a_worker_evicted_during_its_env_step_writes_nothing_more():
    from distrl.recipes.sf.rollout_worker import _Evicted

    w = _worker()
    w.groups[0].env = _Env(2, during=lambda: w.evicted_flag.__setitem__(2, 1))
    with pytest.raises(_Evicted):
        w._step(0)
    with pytest.raises(_Evicted):
        w._request(0)
    assert not any(buf.any() for buf in w.buf.values())  # not one step of the slot it lost


def test_a_worker_never_takes_a_negative_or_foreign_slot_from_the_learners_reply():
    w = _worker()
    grp = w.groups[0]
    for reply in (-1, None, 4, 99):  # "none" at the stop, a stopped wait, out of range
        w.slot_bell = SimpleNamespace(ask=lambda *a: None, wait=lambda *a, r=reply, **k: r)
        grp.slot, grp.t = 1, 3
        assert w._hand_in(0) is False
        assert grp.slot == 1  # never -1: the next write would land in the last slot
    w.slot_bell = SimpleNamespace(ask=lambda *a: None, wait=lambda *a, **k: 3)
    assert w._hand_in(0) is True and grp.slot == 3 and grp.t == 0


def test_a_worker_waits_on_a_busy_learner_and_leaves_only_when_it_is_gone():
    """No free slot within algo.slot_timeout_s: the learner is evaluating or checkpointing (Atari:
    full games for tens of seconds), not gone. The worker pings it and waits on while it answers;
    on 2026-12-03 a 10 s limit made both workers of a Breakout run leave, and the run end."""
    from distrl.transport.base import PeerLostError

    w = _worker()
    w.learner = 0
    w.cfg = SimpleNamespace(transport=SimpleNamespace(call_timeout_s=1.0))
    replies = iter([TimeoutError(), TimeoutError(), 3])

    def wait(*a, **k):
        r = next(replies)
        if isinstance(r, Exception):
            raise r
        return r

    pings = []
    w.ctx.transport = SimpleNamespace(call_sync=lambda *a: pings.append(a))
    w.slot_bell = SimpleNamespace(ask=lambda *a: None, wait=wait)
    assert w._hand_in(0) is True and w.groups[0].slot == 3 and len(pings) == 2

    def gone(*a):
        raise PeerLostError(0, "learner", "EOF")

    w.ctx.transport = SimpleNamespace(call_sync=gone)
    w.slot_bell = SimpleNamespace(ask=lambda *a: None, wait=lambda *a, **k: (_ for _ in ()).throw(TimeoutError()))
    with pytest.raises(PeerLostError):
        w._hand_in(0)


# ---------------------------------------------------------------- SIGSTOP, eviction, SIGCONT


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): a fault test of 14 s or more
@pytest.mark.timeout(120)
def test_a_rollout_worker_stopped_past_eviction_then_continued_writes_nothing_and_the_run_ends_clean(tmp_path, jobs):
    run = tmp_path / "run"
    # rank 3 SIGSTOPs itself in its 20th round, inside a group step (after the env step, before
    # writing its outcome): the window a check once per round left open
    job = jobs.start(
        train_cmd(
            [
                "sf",
                "--experiment",
                "debug",
                "--run-dir",
                str(run),
                "--total-frames",
                "10000000",
                "--set",
                "run.max_time_s=15",
                "--set",
                "transport.call_timeout_s=3",
                "--set",
                "algo.request_timeout_s=2",
                "--set",
                "algo.slot_timeout_s=2",
            ],
            nproc=4,
        ),
        env=child_env(DISTRL_FAULT="stop@3:20"),
    )
    job.wait_for("lost rank 3 (rollout_worker)", timeout=60)
    stopped = [p for p in job.pids() if proc_state(p) == "T"]
    assert stopped, "the stopped worker was not found"
    for pid in stopped:
        os.kill(pid, signal.SIGCONT)
    # The worker's line is awaited while the run still has seconds to go (lost at ~8 s of 15), not read
    # after the learner has ended the job: a line printed by one process races another's exit.
    job.wait_for("[rollout_worker 3] evicted by the learner: slot", timeout=8)
    assert job.wait(60) == 0, job.tail(4000)
    out = job.output
    assert "injecting stop on rank 3" in out and "exiting before writing it" in out, job.tail()
    assert "SlotError" not in out, job.tail()
    s = read_summary(run, {"slots", "slots_reclaimed", "hand_ins_refused"})
    assert "3" in s["lost_ranks"] and s["slots_reclaimed"] >= 1, s["lost_ranks"]
    assert s["hand_ins_refused"] >= 0 and s["stop_reason"] in ("max_time", "total_frames")
