"""Replay storage: FIFO at capacity under far more inserts than it holds, malformed inserts refused
and counted, and its contents carried through the learner's checkpoint and back on resume."""

from __future__ import annotations

import signal

import pytest
import torch
from tensordict import TensorDict

from distrl.runtime.context import RoleContext
from distrl.recipes.impala.recipe import default as default_config
from distrl.config import override
from distrl.replay.store import ReplayStore
from distrl.roles.session import LearnerSession


def transitions(start: int, n: int) -> TensorDict:
    """``n`` items whose observation is their insertion index (so FIFO order can be read back)."""
    idx = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {
            "observation": idx[:, None].expand(n, 4).clone(),
            "action": torch.zeros(n, dtype=torch.long),
            ("next", "reward"): torch.ones(n, 1),
        },
        [n],
    )


def stored_indices(store: ReplayStore) -> set[int]:
    return {int(i) for i in store.buffer[:]["observation"][:, 0]}


def test_inserts_far_beyond_capacity_evict_oldest_first():
    store = ReplayStore(capacity=100, batch_size=16)
    total = 0
    for n in [37] * 50:  # 1,850 items, 18.5x the capacity, in batches that do not divide it
        assert store.extend(transitions(total, n))
        total += n
        assert len(store) == min(total, 100)
    assert store.inserted == total and stored_indices(store) == set(range(total - 100, total))
    sample = store.sample()
    assert sample.shape == (16,) and all(total - 100 <= int(i) < total for i in sample["observation"][:, 0])


@pytest.mark.parametrize(
    "bad",
    [
        lambda td: td.set("observation", td["observation"][:, :3]),  # wrong shape
        lambda td: td.set("observation", td["observation"].double()),  # wrong dtype
        lambda td: td.exclude(("next", "reward")),  # missing key
        lambda td: td.reshape(2, 5),  # not a flat batch of items
    ],
)
def test_a_malformed_insert_is_refused_and_counted(bad):
    store = ReplayStore(capacity=50, batch_size=4)
    assert store.extend(transitions(0, 10))
    before = store.buffer[:].clone()
    assert not store.extend(bad(transitions(10, 10)))
    assert store.rejected == 1 and len(store) == 10 and (store.buffer[:] == before).all()
    assert store.extend(transitions(10, 10)) and len(store) == 20  # the run goes on


def test_contents_survive_the_learner_checkpoint(tmp_path):
    cfg = override(default_config(), **{"run.logger": "none", "run.run_dir": str(tmp_path)})
    model, previous = torch.nn.Linear(4, 2), signal.getsignal(signal.SIGTERM)
    optim = torch.optim.Adam(model.parameters())
    try:
        session = LearnerSession(RoleContext(cfg, None, 0, {0: "learner"}, tmp_path))
        store = ReplayStore(capacity=64, batch_size=8)
        for start in range(0, 300, 30):
            store.extend(transitions(start, 30))
        store.extend(transitions(0, 3)[:, None])  # one refused batch, counted
        session.extra_state = store.state_dict
        session.checkpoint(model, optim)
        session.tracker.writer.close()

        resumed = LearnerSession(RoleContext(override(cfg, **{"run.resume": True}), None, 0, {0: "learner"}, tmp_path))
        state = resumed.restore(model, optim)
        again = ReplayStore(capacity=64, batch_size=8)
        again.load_state_dict(state["extra"])
        resumed.tracker.writer.close()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (again.buffer[:] == store.buffer[:]).all() and (again.inserted, again.rejected) == (300, 1)
    store.extend(transitions(300, 40))  # the write cursor came back too: the same items are evicted next
    again.extend(transitions(300, 40))
    assert (again.buffer[:] == store.buffer[:]).all() and stored_indices(again) == set(range(276, 340))
