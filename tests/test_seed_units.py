"""SEED's pieces in one process: the batching policy, per-env trajectory assembly, recurrent state
resets (episode end, worker restart), the recurrent replay the learner trains on, the handlers."""

from __future__ import annotations

import queue
import threading
import time
from types import SimpleNamespace
from dataclasses import dataclass, field

import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.impala import impala_loss
from distrl.recipes import get_recipe
from distrl.config import NetConfig, override
from distrl.data import keys
from distrl.data.wire import payload_nbytes
from distrl.nn.models import ActorCritic
from distrl.data.keys import CORE_STATE
from distrl.nn.recurrent import RecurrentActorCritic, UnrolledCore
from distrl.roles.batcher import (
    ACTION,
    FINAL_OBS,
    GROUP,
    OBS,
    RANK,
    REWARD,
    RUN_ID,
    STOP,
    TERMINATED,
    TRUNCATED,
    DynamicBatcher,
    Request,
)
from distrl.recipes.seed.inference import InferenceServer
from distrl.data.unrolls import GroupTrajectories


# ---------------------------------------------------------------- batching policy


@dataclass(eq=False)
class FakeRequest:
    size: int
    arrived: float = field(default_factory=time.monotonic)


def test_batch_closes_at_the_size_bound_without_splitting_requests():
    b = DynamicBatcher(max_envs=8, max_wait_s=30.0, capacity=16)
    reqs = [FakeRequest(4) for _ in range(5)] + [FakeRequest(3), FakeRequest(20)]
    for r in reqs:
        b.put(r)
    start = time.monotonic()
    batches = [b.next_batch(0.1) for _ in range(5)]
    assert time.monotonic() - start < 15.0  # full batches never wait for the 30 s deadline
    assert [[reqs.index(r) for r in batch] for batch in batches[:3]] == [[0, 1], [2, 3], [4, 5]]
    assert batches[3] == [reqs[6]]  # bigger than the bound alone: served alone, not split
    assert batches[4] == [] and all(sum(r.size for r in bt) <= 8 for bt in batches[:3])


def test_batch_closes_at_the_wait_bound_measured_from_arrival():
    # Timings as orders with room (2 busy cores can delay a thread by a second): the wait bound
    # 0.15 s against an idle timeout of 30 s, and a late arrival given 30 s to be waited for.
    b = DynamicBatcher(max_envs=100, max_wait_s=0.15, capacity=4)
    first = FakeRequest(4)
    b.put(first)
    batch = b.next_batch(30.0)
    waited = time.monotonic() - first.arrived
    print(f"\nwait bound 0.15 s: closed {waited:.3f} s after the arrival")
    # closed at the deadline counted from the arrival (never before), not at the idle timeout
    assert len(batch) == 1 and 0.15 <= waited < 15.0
    # a request that arrives within the wait joins the batch (here it fills it, so no test waits 30 s)
    b = DynamicBatcher(max_envs=8, max_wait_s=30.0, capacity=4)
    b.put(FakeRequest(4))
    timer = threading.Timer(0.05, lambda: b.put(FakeRequest(4)))
    timer.start()
    assert len(b.next_batch(1.0)) == 2
    timer.join()
    assert b.next_batch(0.01) == []  # idle: returns after the idle timeout
    # a request that already waited past the deadline is served at once, with what is queued
    b = DynamicBatcher(max_envs=100, max_wait_s=30.0, capacity=4)
    b.put(FakeRequest(4, arrived=time.monotonic() - 60.0))
    b.put(FakeRequest(4))
    start = time.monotonic()
    assert len(b.next_batch(1.0)) == 2 and time.monotonic() - start < 15.0  # not the second's 30 s


def test_queue_bound_and_drain():
    b = DynamicBatcher(max_envs=4, max_wait_s=0.0, capacity=2)
    b.put(FakeRequest(3))
    b.put(FakeRequest(3))
    with pytest.raises(Exception):
        b.put(FakeRequest(3))  # more in flight than the bound: refused, never blocks
    assert len(b.next_batch(0.1)) == 1  # the second does not fit: carried
    assert len(b.drain()) == 1 and b.drain() == []


def test_a_pulling_batcher_fills_its_queue_itself_with_the_same_policy():
    """sf's inference: no thread puts requests in; the batcher pulls them when its queue is empty."""
    arrivals = [[FakeRequest(3)], [], [FakeRequest(3), FakeRequest(3)], [FakeRequest(4)]]
    waits = []

    def pull(timeout_s):
        waits.append(timeout_s)
        for r in arrivals.pop(0) if arrivals else []:
            b.put(r)

    b = DynamicBatcher(max_envs=6, max_wait_s=0.05, capacity=4, pull=pull)
    assert len(b.next_batch(1.0)) == 1  # pulled one, then waited (pulled nothing) until its deadline
    assert waits[0] == 1.0 and 0 < waits[1] <= 0.05
    assert [r.size for r in b.next_batch(1.0)] == [3, 3]  # two at once: the size bound closes it
    assert [r.size for r in b.next_batch(1.0)] == [4]
    assert b.next_batch(0.01) == [] and waits[-1] == 0.01  # idle: one pull with the idle timeout
    arrivals.append([FakeRequest(1)])
    assert len(b.drain()) == 1  # what the doorbell still holds is answered at shutdown too


# ---------------------------------------------------------------- trajectory assembly


def _f(*rows):
    return torch.tensor(rows, dtype=torch.float32).reshape(len(rows), -1)


def _b(*v):
    return torch.tensor(v, dtype=torch.bool)


def test_assembly_across_episode_ends():
    """Two envs, T=3: env 0 terminates at step 1, env 1 is truncated at step 2."""
    g = GroupTrajectories(num_envs=2, obs_shape=1, unroll_length=3)
    no = _b(False, False)
    assert g.observe(7, _f(0, 10), torch.zeros(2), no, no, torch.zeros(0, 1)) is None  # first message
    g.act(_f(0, 10), torch.tensor([0, 1]), torch.tensor([-0.1, -0.2]), version=0)
    assert g.observe(7, _f(1, 11), torch.tensor([1.0, 2.0]), no, no, torch.zeros(0, 1)) is None
    g.act(_f(1, 11), torch.tensor([1, 0]), torch.tensor([-0.3, -0.4]), version=1)
    # env 0 terminated: its new observation 100 is a reset, its true last observation 2 comes aside
    assert g.observe(7, _f(100, 12), torch.tensor([3.0, 4.0]), _b(True, False), no, _f(2)) is None
    g.act(_f(100, 12), torch.tensor([1, 1]), torch.tensor([-0.5, -0.6]), version=2)
    chunk, returns = g.observe(7, _f(101, 200), torch.tensor([5.0, 6.0]), no, _b(False, True), _f(13))
    traj = chunk["traj"]
    assert tuple(traj.batch_size) == (2, 3) and set(keys.IMPALA_IN_KEYS) <= set(traj.keys(True, True))
    assert traj[keys.OBSERVATION][..., 0].tolist() == [[0, 1, 100], [10, 11, 12]]
    assert traj[keys.NEXT_OBSERVATION][..., 0].tolist() == [[1, 2, 101], [11, 12, 13]]
    assert traj[keys.REWARD][..., 0].tolist() == [[1, 3, 5], [2, 4, 6]]
    assert traj[keys.DONE][..., 0].tolist() == [[False, True, False], [False, False, True]]
    assert traj[keys.TERMINATED][..., 0].tolist() == [[False, True, False], [False, False, False]]
    assert traj[keys.ACTION].tolist() == [[0, 1, 1], [1, 0, 1]]
    torch.testing.assert_close(traj[keys.ACTION_LOG_PROB], torch.tensor([[-0.1, -0.3, -0.5], [-0.2, -0.4, -0.6]]))
    assert traj[keys.POLICY_VERSION].tolist() == [[0, 1, 2], [0, 1, 2]]
    assert returns == [4.0, 12.0]  # env 0: 1 + 3; env 1: 2 + 4 + 6
    # the next chunk starts from the observation the server acts on now, in fresh buffers
    g.act(_f(101, 200), torch.tensor([0, 0]), torch.tensor([-0.7, -0.8]), version=3)
    assert traj[keys.OBSERVATION][0, 0, 0] == 0 and g.t == 0 and g.pending


def test_recurrent_state_resets_on_episode_end_and_on_worker_restart():
    g = GroupTrajectories(num_envs=3, obs_shape=1, unroll_length=4, state_shape=(4, 2))
    no = _b(False, False, False)
    g.observe(1, _f(0, 0, 0), torch.zeros(3), no, no, torch.zeros(0, 1))
    g.act(_f(0, 0, 0), torch.zeros(3, dtype=torch.long), torch.zeros(3), 0, new_state=torch.ones(3, 4, 2))
    g.observe(1, _f(1, 1, 1), torch.ones(3), _b(False, True, False), no, _f(9))
    assert g.core_state[:, 0, 0].tolist() == [1.0, 0.0, 1.0]  # only the env whose episode ended
    g.act(_f(1, 1, 1), torch.zeros(3, dtype=torch.long), torch.zeros(3), 0, new_state=torch.full((3, 4, 2), 2.0))
    assert g.restarts == 0 and g.t == 1 and g.pending
    # the worker restarted: a new run id resets every env of the group and drops the partial unroll
    assert g.observe(2, _f(5, 5, 5), torch.ones(3), no, no, torch.zeros(0, 1)) is None
    assert (g.core_state == 0).all() and g.t == 0 and not g.pending and g.restarts == 1 and g.returns == []
    assert (g.ep_return == 0).all()


def _server(core="lstm", groups=1, envs=2, T=3, max_wait_ms=0.0, max_batch_envs=64):
    cfg = override(
        get_recipe("seed").default_config(),
        **{
            "algo.envs_per_worker": envs * groups,
            "algo.groups_per_worker": groups,
            "algo.unroll_length": T,
            "algo.core": core,
            "algo.core_size": 4,
            "net.hidden": (8,),
            "algo.max_wait_ms": max_wait_ms,
            "algo.max_batch_envs": max_batch_envs,
            "run.env": "distrl/MatchSign-v0",
        },
    )
    torch.manual_seed(0)
    net = NetConfig(hidden=(8,))
    model = RecurrentActorCritic(1, 2, net, 4) if core == "lstm" else ActorCritic(1, 2, net)
    out = queue.Queue(maxsize=4)
    return InferenceServer(model, threading.Lock(), lambda: 5, cfg, [1], 1, torch.device("cpu"), out), out


def _msg(obs, reward=None, term=None, trunc=None, final=None, run_id=1, group=0, rank=1) -> TensorDict:
    n = len(obs)
    z = torch.zeros(n, dtype=torch.bool)
    return TensorDict(
        {
            OBS: _f(*obs),
            REWARD: torch.zeros(n) if reward is None else torch.tensor(reward),
            TERMINATED: z if term is None else _b(*term),
            TRUNCATED: z if trunc is None else _b(*trunc),
            FINAL_OBS: torch.zeros(0, 1) if final is None else _f(*final),
            RANK: torch.tensor(rank),
            GROUP: torch.tensor(group),
            RUN_ID: torch.tensor(run_id),
        }
    )


def test_server_steps_each_env_from_its_own_state_and_resets_it():
    server, out = _server()
    model, g = server.model, server.groups[(1, 0)]
    serve = lambda td: server._serve([Request.from_message(td, 2, 1)])  # noqa: E731
    serve(_msg([1, -1]))
    with torch.no_grad():
        _, _, expected = model.step(_f(1, -1), model.initial_state(2))
    torch.testing.assert_close(g.core_state, expected)
    before = g.core_state.clone()
    serve(_msg([-1, 1], reward=[1.0, 0.0], term=[True, False], final=[1]))  # env 0's episode ended
    with torch.no_grad():
        _, _, fresh = model.step(_f(-1), model.initial_state(1))
        _, _, kept = model.step(_f(1), before[1:])
    torch.testing.assert_close(g.core_state[0:1], fresh)
    torch.testing.assert_close(g.core_state[1:], kept)
    serve(_msg([1, 1], reward=[0.0, 1.0]))
    serve(_msg([1, -1], reward=[1.0, 1.0]))  # third outcome: a [2, 3] chunk is cut
    chunk, returns = out.get_nowait()
    assert tuple(chunk["traj"].batch_size) == (2, 3) and chunk[CORE_STATE].shape == (2, 4, 4)
    assert (chunk[CORE_STATE] == 0).all() and returns == [1.0]
    assert (chunk["traj"][keys.POLICY_VERSION] == 5).all()
    serve(_msg([1, 1], run_id=2))  # restarted worker: every env starts from a zero state
    with torch.no_grad():
        _, _, expected = model.step(_f(1, 1), model.initial_state(2))
    torch.testing.assert_close(g.core_state, expected)
    assert g.restarts == 1


def test_handlers_batch_concurrent_requests_and_answer_stop():
    # a 30 s wait bound that the two requests' 4 envs fill: one batch however late the second
    # thread starts on a busy machine, and no test waits for the bound
    server, _ = _server(core="mlp", groups=2, max_wait_ms=30_000.0, max_batch_envs=4)
    server.start()
    try:
        replies = [None, None]

        def call(i):
            replies[i] = server.infer(_msg([1, -1], group=i))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert all(r[ACTION].dtype == torch.int32 and r[ACTION].shape == (2,) and not r[STOP] for r in replies)
        deadline = time.monotonic() + 20  # stats are recorded just after the replies go out
        while server.stats.summary()["inference_batches"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.stats.summary()["inference_batch_fill_mean"] == 2.0  # both in one batch: 4 envs
        sent = payload_nbytes(_msg([1, -1])) + payload_nbytes(replies[0])
        assert server.wire.bytes == 2 * sent and server.wire.frames == 4
        with pytest.raises(ValueError, match="observation"):
            server.infer(_msg([1, -1, 1]))  # wrong group size: rejected, counted
        assert server.counts()["rejected_requests"] == 1
        server.stop()
        assert bool(server.infer(_msg([1, -1]))[STOP]) and server.said_stop == {1}
    finally:
        server.close()


def test_recurrent_replay_matches_stepping_and_trains_with_the_impala_loss():
    torch.manual_seed(0)
    model = RecurrentActorCritic(3, 2, NetConfig(hidden=(8,)), 5)
    B, T = 2, 6
    obs, next_obs = torch.randn(B, T, 3), torch.randn(B, T, 3)
    done = torch.zeros(B, T, dtype=torch.bool)
    done[0, 2] = done[1, 4] = True
    state0 = torch.randn(B, 4, 5)
    view = UnrolledCore(model, state0, done)
    logits, value = view(obs)
    state, want_logits, want_next = state0, [], []
    for t in range(T):
        if t:
            state = state * (~done[:, t - 1]).float()[:, None, None]
        lg, _, state = model.step(obs[:, t], state)
        want_logits.append(lg)
        want_next.append(model.step(next_obs[:, t], state)[1])
    torch.testing.assert_close(logits, torch.stack(want_logits, 1))
    torch.testing.assert_close(view.value(next_obs), torch.stack(want_next, 1))
    batch = TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: torch.randint(0, 2, (B, T)),
            keys.ACTION_LOG_PROB: torch.full((B, T), -0.7),
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: next_obs,
                    "reward": torch.ones(B, T, 1),
                    "done": done[..., None],
                    "terminated": done[..., None],
                },
                [B, T],
            ),
        },
        [B, T],
    )
    out = impala_loss(
        UnrolledCore(model, state0, done),
        batch,
        SimpleNamespace(
            gamma=0.99,
            rho_bar=1.0,
            c_bar=1.0,
            value_coef=0.5,
            entropy_coef=0.01,
            normalize_advantage=False,
            reward_scale=1.0,
        ),
    )
    out["loss"].backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"algo.envs_per_worker": 10, "algo.groups_per_worker": 3}, "must be a multiple of algo.groups_per_worker"),
        ({"algo.core": "gru"}, "algo.core must be one of"),
        ({"algo.max_wait_ms": -1}, "algo.max_wait_ms must be >= 0"),
    ],
)
def test_config_invariants(changes, message):
    with pytest.raises(ValueError, match=message):
        override(get_recipe("seed").default_config(), **changes)


def test_launch_checks_timeouts():
    recipe = get_recipe("seed")
    with pytest.raises(ValueError, match="below transport.call_timeout_s"):
        recipe.check_config(override(recipe.default_config(), **{"algo.request_timeout_s": 40.0}))
    assert recipe.rank_table(1, recipe.default_config()) == {0: "learner", 1: "env_worker", 2: "env_worker"}


def test_running_norm_matches_the_statistics_of_everything_seen():
    from distrl.nn.recurrent import RunningNorm

    torch.manual_seed(0)
    norm, seen = RunningNorm(3), []
    for n in (5, 17, 40):
        x = torch.randn(n, 3) * torch.tensor([0.01, 1.0, 30.0]) + torch.tensor([0.0, 2.0, -5.0])
        norm.update_batch(x)
        seen.append(x)
    allx = torch.cat(seen)
    torch.testing.assert_close(norm.mean, allx.mean(0), rtol=1e-4, atol=1e-5)
    # the prior (var 1, weight 1e-4) leaves a bias of ~1e-6
    torch.testing.assert_close(norm.var, allx.var(0, unbiased=False), rtol=1e-3, atol=1e-5)
    z = norm(allx)
    torch.testing.assert_close(z.mean(0), torch.zeros(3), atol=1e-3, rtol=0)
    torch.testing.assert_close(z.std(0, unbiased=False), torch.ones(3), atol=2e-2, rtol=0)
