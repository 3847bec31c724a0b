"""Ape-X's pieces in one process: the actor's transitions carry the learner's keys, two replay
shards sample as one buffer, the samples-per-insert limiter, replay contents through a checkpoint."""

from __future__ import annotations

import signal

import pytest
import torch
from tensordict import TensorDict

from distrl.recipes.apex.recipe import default as default_config
from distrl.runtime.context import RoleContext
from distrl.config import override
from distrl.data import keys
from distrl.replay.store import SamplesPerInsertLimiter
from distrl.recipes.apex.actor import ApexActor
from distrl.replay.client import ShardedReplayClient
from distrl.replay.server import ReplayServer
from distrl.roles.session import LearnerSession
from distrl.transport.local import LocalHub


def cfg_for(tmp_path, **changes):
    base = {
        "run.logger": "none",
        "run.run_dir": str(tmp_path),
        "algo.min_replay_size": 0,
        "algo.capacity": 256,
        "algo.samples_per_insert": 0.0,
        "algo.alpha": 0.7,
    }  # (in an order each step of which is valid)
    return override(default_config(), **(base | changes))


def items(values: torch.Tensor) -> TensorDict:
    """Transitions whose observation is ``values`` (so samples can be told apart)."""
    n = values.shape[0]
    return TensorDict(
        {
            keys.OBSERVATION: values[:, None].expand(n, 4).float().clone(),
            keys.ACTION: torch.zeros(n, dtype=torch.int64),
            (keys.NEXT, keys.OBSERVATION): torch.zeros(n, 4),
            keys.NSTEP_RETURN: torch.ones(n),
            keys.BOOTSTRAP_DISCOUNT: torch.ones(n),
            keys.POLICY_VERSION: torch.zeros(n, dtype=torch.int64),
        },
        [n],
    )


@pytest.fixture
def servers():
    """``servers(cfg, roles, tmp_path) -> (hub, {rank: ReplayServer})``; every hub is closed after the test."""
    hubs = []

    def make(cfg, roles, tmp_path):
        hubs.append(hub := LocalHub(len(roles)))
        return hub, {
            r: ReplayServer(RoleContext(cfg, hub.endpoint(r), r, roles, tmp_path))
            for r, n in roles.items()
            if n == "replay"
        }

    yield make
    for hub in hubs:
        hub.close()


def insert(server: ReplayServer, values: torch.Tensor, priority: torch.Tensor) -> None:
    reply = server._insert(TensorDict(transitions=items(values), **{keys.PRIORITY: priority}))
    assert not bool(reply["held"])
    with server.lock:
        server._drain()


def test_actor_transitions_carry_the_learner_keys(tmp_path):
    cfg = cfg_for(tmp_path, **{"algo.envs_per_actor": 3, "algo.unroll_length": 5, "algo.n_step": 3})
    roles = {0: "learner", 1: "replay", 2: "actor"}
    actor = ApexActor(RoleContext(cfg, LocalHub(3).endpoint(2), 2, roles, tmp_path))
    first, priority = actor.transitions(actor.runner.unroll(actor._act, 5)[0])
    second, _ = actor.transitions(actor.runner.unroll(actor._act, 5)[0])
    assert first.shape == (3 * 3,) and second.shape == (3 * 5,)  # the carry gives later unrolls every step
    assert set(keys.APEX_IN_KEYS) <= set(second.keys(include_nested=True, leaves_only=True))
    assert priority.shape == first.shape and (priority >= 0).all()
    assert actor.epsilon == pytest.approx(0.4) and (first[keys.POLICY_VERSION] == -1).all()
    actor.runner.close()


def test_two_shards_sample_as_one_buffer(tmp_path, servers):
    """Sharded: shard r drawn with S_r / S, then item i with leaf_i / S_r: P(i) = leaf_i / S, the
    probability one buffer holding every item gives it; weights use the minimum over all shards.
    Frequencies: chi-square over 60k draws, false-failure rate 1e-6 (fixed seed)."""
    cfg = cfg_for(tmp_path)
    roles = {0: "learner", 1: "replay", 2: "replay", 3: "replay"}
    hub, shard = servers(cfg, roles, tmp_path)
    g = torch.Generator().manual_seed(3)
    values, priority = torch.arange(40.0), torch.rand(40, generator=g) * 4 + 0.01
    insert(shard[1], values[:25], priority[:25])  # uneven shards
    insert(shard[2], values[25:], priority[25:])
    insert(shard[3], values, priority)  # the one buffer
    split = ShardedReplayClient(hub.endpoint(0), [1, 2], 10.0, 0, lambda r, why: None)
    whole = ShardedReplayClient(hub.endpoint(0), [3], 10.0, 0, lambda r, why: None)
    counts = torch.zeros(40)
    for _ in range(60):
        a = split.collect(split.request(1000), beta=0.5)
        b = whole.collect(whole.request(1000), beta=0.5)
        counts += torch.bincount(a[keys.OBSERVATION][:, 0].long(), minlength=40)
        by_value_a = dict(zip(a[keys.OBSERVATION][:, 0].tolist(), a[keys.PRIORITY_WEIGHT].tolist()))
        by_value_b = dict(zip(b[keys.OBSERVATION][:, 0].tolist(), b[keys.PRIORITY_WEIGHT].tolist()))
        for v in set(by_value_a) & set(by_value_b):
            assert by_value_a[v] == pytest.approx(by_value_b[v], rel=1e-5)
    assert split.sizes == {1: 25, 2: 15} and sum(split.totals.values()) == pytest.approx(whole.totals[3], rel=1e-9)
    p = shard[3].sampler.probabilities(torch.arange(40))  # slot i holds value i in the one buffer
    expected = p * counts.sum()
    chi2 = float(((counts.double() - expected) ** 2 / expected).sum())
    p_value = float(torch.special.gammaincc(torch.tensor(39 / 2, dtype=torch.float64), torch.tensor(chi2 / 2)))
    assert p_value > 1e-6, (chi2, p_value)


def test_rate_limiter_keeps_the_ratio_and_never_holds_both_sides():
    spi, n_insert, n_sample, min_size = 4.0, 100, 64, 300
    limiter = SamplesPerInsertLimiter(spi, tolerance=(n_sample + spi * n_insert) / 2, min_size=min_size)
    assert not limiter.can_sample(n_sample)  # nothing to sample before min_size
    g = torch.Generator().manual_seed(0)
    for _ in range(5000):  # actors and learner race at random speeds
        want_insert = torch.rand(1, generator=g).item() < 0.5
        can_i, can_s = limiter.can_insert(n_insert), limiter.can_sample(n_sample)
        assert can_i or can_s, "deadlock"
        if (want_insert and can_i) or not can_s:
            limiter.inserts += n_insert
        else:
            limiter.samples += n_sample
        if limiter.inserts >= min_size:
            assert abs(limiter.error) <= limiter.tolerance + spi * n_insert
    ratio = limiter.samples / (limiter.inserts - min_size)
    assert ratio == pytest.approx(spi, rel=0.05)
    assert SamplesPerInsertLimiter(0, 0, 10).can_insert(10**9)  # off: only min_size applies


def test_a_shard_holds_the_learner_and_the_actors(tmp_path, servers):
    cfg = cfg_for(
        tmp_path,
        **{
            "algo.capacity": 100_000,
            "algo.spi_tolerance": 4200.0,
            "algo.samples_per_insert": 2.0,
            "algo.batch_size": 64,
            "algo.min_replay_size": 100,
        },
    )
    _, shard = servers(cfg, {0: "learner", 1: "replay"}, tmp_path)
    s = shard[1]
    assert bool(s._sample(TensorDict(n=torch.tensor(64)))["held"])  # empty: the learner waits
    while not bool(s._insert(TensorDict(transitions=items(torch.arange(256.0)), priority=torch.ones(256)))["held"]):
        with s.lock:
            s._drain()
    assert s.counts["insert_held"] == 1 and s.limiter.error - 2.0 * 256 < -4200  # actors are ahead: held
    while not bool(s._sample(TensorDict(n=torch.tensor(64)))["held"]):
        pass
    assert s.limiter.error + 64 > 4200 and s.counts["sample_held"] == 2  # the learner caught up and is held
    assert not bool(s._insert(TensorDict(transitions=items(torch.arange(256.0)), priority=torch.ones(256)))["held"])


def test_replay_contents_survive_the_learner_checkpoint(tmp_path, servers):
    cfg = cfg_for(tmp_path)
    roles = {0: "learner", 1: "replay"}
    model, previous = torch.nn.Linear(4, 2), signal.getsignal(signal.SIGTERM)
    optim = torch.optim.Adam(model.parameters())
    try:
        hub, shard = servers(cfg, roles, tmp_path)
        insert(shard[1], torch.arange(300.0), torch.rand(300))  # 300 into 256: FIFO wrapped
        client = ShardedReplayClient(hub.endpoint(0), [1], 10.0, 0, lambda r, why: None)
        batch = client.collect(client.request(32), beta=1.0)
        client.update_priorities(batch, torch.full((batch.shape[0],), 7.0))
        while client.updates:
            client.updates.popleft().result()
        session = LearnerSession(RoleContext(cfg, None, 0, roles, tmp_path))
        session.extra_state = lambda: {"replay": client.states()}
        session.checkpoint(model, optim)
        session.tracker.writer.close()

        resumed = LearnerSession(RoleContext(override(cfg, **{"run.resume": True}), None, 0, roles, tmp_path))
        state = resumed.restore(model, optim)
        resumed.tracker.writer.close()
        hub2, shard2 = servers(cfg, roles, tmp_path)
        ShardedReplayClient(hub2.endpoint(0), [1], 10.0, 0, lambda r, why: None).load_states(state["extra"]["replay"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    a, b = shard[1], shard2[1]
    assert (a.store.buffer[:].exclude("index") == b.store.buffer[:].exclude("index")).all()
    torch.testing.assert_close(a.sampler.tree.sums[-1], b.sampler.tree.sums[-1])
    torch.testing.assert_close(a.sampler.tree.sums[0], b.sampler.tree.sums[0])
    assert b.store.inserted == 300 and b.limiter.samples == a.limiter.samples == 32
    insert(a, torch.arange(300.0, 310.0), torch.ones(10))  # the write cursor came back: same slots next
    insert(b, torch.arange(300.0, 310.0), torch.ones(10))
    assert (a.store.buffer[:][keys.OBSERVATION] == b.store.buffer[:][keys.OBSERVATION]).all()
