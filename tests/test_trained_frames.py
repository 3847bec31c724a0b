"""The frames a run reports are the frames its learner trained on: rows ``sf`` drops for lag and
gradients A3C drops for staleness go to ``frames_dropped``, never to ``env_frames`` or the rates
(``fps``, ``fps_running``) that the benchmarks hold against TorchRL.

Each test drives a real learner in this process over the local transport (no process, no loop):
the sf learner cuts a batch from slots handed in through its doorbell, one of them too old; the
parameter server applies gradients pushed to it, one of them too stale.
"""

from __future__ import annotations

import json
import signal

import pytest
import torch
from tensordict import TensorDict

from distrl.recipes import get_recipe
from distrl.runtime.context import RoleContext
from distrl.config import override
from distrl.data import keys
from distrl.recipes.sf.recipe import debug
from distrl.transport.local import LocalHub


@pytest.fixture(autouse=True)
def _sessions_closed(monkeypatch):
    """Every learner session made here has its metric files closed and pytest's SIGTERM handler
    back (an in-process learner installs its own)."""
    from distrl.roles import session

    made, handler = [], signal.getsignal(signal.SIGTERM)
    init = session.LearnerSession.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(session.LearnerSession, "__init__", record)
    yield
    for s in made:
        if s.tracker.writer is not None:
            s.tracker.writer.close()
    signal.signal(signal.SIGTERM, handler)


def test_sf_counts_the_rows_it_trains_on_and_reports_those_dropped_for_lag_apart(tmp_path):
    from distrl.recipes.sf import doorbell as bell
    from distrl.recipes.sf.learner import SFLearner

    cfg = override(debug(), **{"run.logger": "none", "algo.max_policy_lag": 20})  # 8 envs a group, T 20, batch 16 rows
    roles = dict(enumerate(get_recipe("sf").roles_for_config(3, cfg)))  # learner, inference, worker
    learner = SFLearner(RoleContext(cfg, LocalHub(3).endpoint(0), 0, roles, tmp_path))
    worker = bell.WorkerBell(learner.shm_path, 0, 2, bell.SLOT)
    tracker = learner.session.tracker
    try:
        slots = learner._attached(TensorDict({keys.WORKER_RANK: torch.tensor(2)}))[keys.SLOT].flatten().tolist()
        tracker.updates = 30
        T, rows = cfg.algo.unroll_length, cfg.algo.envs_per_group
        # handed in: a slot acted 30 updates ago (past the cap of 20), then two fresh ones
        for group, slot, version in ((0, slots[0], 0), (1, slots[2], 30), (0, slots[1], 30)):
            learner.traj[keys.POLICY_VERSION][slot] = version
            worker.ask(group, slot, T)
        batch = learner.next_batch()
        assert batch.shape == (cfg.algo.batch_size, T)
        assert bool((batch[keys.POLICY_VERSION] == 30).all())  # the old slot's rows were dropped
        assert tracker.env_frames == cfg.algo.batch_size * T == 2 * rows * T  # not 3 slots' worth
        assert tracker.frames_dropped == tracker.counters["samples_dropped_for_lag"] == rows * T
        summary = tracker.summary("total_frames", [])
        assert (summary["env_frames"], summary["frames_dropped"]) == (2 * rows * T, rows * T)
        assert json.loads((tmp_path / "summary.json").read_text())["frames_dropped"] == rows * T
    finally:
        worker.close()
        learner.bell.close()
        learner._maybe_unlink(force=True)


def test_sf_rows_that_age_past_the_cap_before_the_batch_is_cut_are_not_counted(tmp_path):
    from distrl.recipes.sf.learner import SFLearner

    cfg = override(debug(), **{"run.logger": "none", "algo.max_policy_lag": 20})
    roles = dict(enumerate(get_recipe("sf").roles_for_config(3, cfg)))
    learner = SFLearner(RoleContext(cfg, LocalHub(3).endpoint(0), 0, roles, tmp_path))
    tracker = learner.session.tracker
    try:
        B, T = cfg.algo.batch_size, cfg.algo.unroll_length
        rows = learner.traj[0][:1].expand(B, T).clone()
        rows[keys.POLICY_VERSION] = torch.tensor([0] * (B // 2) + [25] * (B // 2)).unsqueeze(1).expand(B, T)
        learner.rows.add(rows)  # within the cap when they arrived (updates 0); then 30 updates went by
        tracker.updates = 30
        batch = learner.next_batch()
        assert batch.shape == (B // 2, T)
        assert tracker.env_frames == (B // 2) * T and tracker.frames_dropped == (B // 2) * T
    finally:
        learner.bell.close()
        learner._maybe_unlink(force=True)


def _server(tmp_path, **changes):
    from distrl.recipes.a3c.parameter_server import ParameterServer

    cfg = override(
        get_recipe("a3c").default_config(), **{"run.env": "distrl/MatchSign-v0", "run.logger": "none", **changes}
    )
    return ParameterServer(
        RoleContext(cfg, LocalHub(3).endpoint(0), 0, {0: "parameter_server", 1: "worker", 2: "worker"}, tmp_path)
    )


def _gradient(server, rank: int, version: int, frames: int) -> TensorDict:
    return TensorDict(
        {
            keys.GRADIENT: torch.full((server.num_params,), 1e-3),
            keys.POLICY_VERSION: torch.tensor(version),
            keys.FRAMES: torch.tensor(frames),
            keys.WORKER_RANK: torch.tensor(rank),
            keys.EPISODE_RETURNS: torch.tensor([1.0]),
            keys.EPISODE_LENGTHS: torch.tensor([5]),
            keys.WORKER_STATS: TensorDict(entropy=torch.tensor(0.5)),
        }
    )


def test_a3c_counts_the_frames_of_applied_gradients_only(tmp_path):
    server = _server(tmp_path, **{"algo.max_staleness": 1})
    # applied at server versions 0, 1, 2; the last (version 0 at server version 3) is past the cap
    for rank, version, frames in ((1, 0, 10), (2, 0, 20), (1, 1, 30), (2, 0, 1000)):
        server._push(_gradient(server, rank, version, frames))
    for _ in range(4):
        server.update(server.next_batch())
    t = server.session.tracker
    assert server.version == 3 and t.counters["dropped_stale_gradients"] == 1
    assert t.env_frames == 60 and t.frames_dropped == 1000
    assert t.episodes == 4  # an episode that ended is one whether or not its gradient was applied
    summary = t.summary("total_frames", [], server.summary_extra())
    assert summary["env_frames"] == 60 and summary["frames_dropped"] == 1000


def test_a2c_does_not_count_a_gradient_from_an_old_version(tmp_path):
    server = _server(tmp_path, **{"algo.sync": True})
    for rank, version, frames in ((1, 0, 10), (2, 0, 10), (1, 0, 500), (1, 1, 10), (2, 1, 10)):
        server._push(_gradient(server, rank, version, frames))  # the third is from a version already applied
    while server.version < 2:
        batch = server.next_batch()
        if batch is not None:
            server.update(batch)
    t = server.session.tracker
    assert t.counters["dropped_stale_gradients"] == 1
    assert t.env_frames == 40 and t.frames_dropped == 500
