"""Ape-X's insert on the wire: the packed window gives back the transitions the actor built whole
(exactly, but for the bootstrap observation of a terminated episode, never read: zeros), the
replay shard stores them and counts the bytes, and a MinAtar step costs at most its observation
plus 64 bytes (issue "Pixels I")."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.estimators import nstep_returns
from distrl.data import keys
from distrl.data.wire import payload_nbytes
from distrl.envs.gym import env_info
from distrl.nn.models import QNetwork
from distrl.recipes.apex.recipe import default as default_config, minatar
from distrl.data.transitions import FINAL, OFFSET, pack_transitions, unpack_transitions
from distrl.runtime.context import RoleContext
from distrl.config import override
from distrl.replay.client import ShardedReplayClient
from distrl.replay.server import ReplayServer
from distrl.transport.local import LocalHub


def window_of(B: int, W: int, obs_shape: tuple, dtype: torch.dtype, ends: torch.Tensor, seed: int = 0) -> TensorDict:
    """A ``[B, W]`` window stepped the slow way: ``observation[t + 1]`` is ``next observation[t]``
    unless the episode ended at ``t`` (``ends [B, W]``: 0 on, 1 terminated, 2 truncated), when it
    is a fresh first observation and the next observation is the true final one."""
    g = torch.Generator().manual_seed(seed)

    def draw():
        if dtype == torch.bool:
            return torch.rand(B, *obs_shape, generator=g) < 0.5
        if dtype == torch.uint8:
            return torch.randint(0, 256, (B, *obs_shape), generator=g, dtype=torch.uint8)
        return torch.randn(B, *obs_shape, generator=g)

    obs, next_obs = torch.empty(W, B, *obs_shape, dtype=dtype), torch.empty(W, B, *obs_shape, dtype=dtype)
    term, trunc = (ends == 1).T, (ends == 2).T  # [W, B]
    current = draw()
    for t in range(W):
        obs[t], next_obs[t] = current, draw()
        reset = draw()
        done = (term[t] | trunc[t]).view(B, *[1] * len(obs_shape))
        current = torch.where(done, reset, next_obs[t])
    td = TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: torch.randint(0, 6, (W, B), generator=g),
            keys.CHOSEN_ACTION_VALUE: torch.randn(W, B, generator=g),
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: next_obs,
                    keys.STEP_REWARD: torch.randn(W, B, 1, generator=g),
                    keys.STEP_DONE: (term | trunc)[..., None],
                    keys.STEP_TERMINATED: term[..., None],
                    keys.STEP_TRUNCATED: trunc[..., None],
                },
                batch_size=[W, B],
            ),
        },
        batch_size=[W, B],
    )
    return td.transpose(0, 1).contiguous()


def plain_transitions(window: TensorDict, n: int, gamma: float, version: int):
    """The insert as the actor built it before the packed form: every transition whole, its
    observation and its bootstrap observation. Returns ``(transitions [N], G, discount, last)``;
    the packed form gives back ``transitions`` with the bootstrap observation zeroed where the
    discount is 0."""
    nxt = window[keys.NEXT]
    G, discount, last = nstep_returns(
        nxt[keys.STEP_REWARD][..., 0], nxt[keys.STEP_TERMINATED][..., 0], nxt[keys.STEP_TRUNCATED][..., 0], gamma, n
    )
    Tp = G.shape[1]
    head = window[:, :Tp]
    rows = torch.arange(last.shape[0])[:, None]
    bootstrap = nxt[keys.OBSERVATION][rows, last]
    out = TensorDict(
        {
            keys.OBSERVATION: head[keys.OBSERVATION],
            keys.ACTION: head[keys.ACTION],
            keys.NEXT: TensorDict({keys.OBSERVATION: bootstrap}, batch_size=G.shape),
            keys.NSTEP_RETURN: G,
            keys.BOOTSTRAP_DISCOUNT: discount,
            keys.POLICY_VERSION: torch.full(G.shape, version, dtype=torch.int64),
        },
        batch_size=G.shape,
    ).reshape(-1)
    return out, G, discount, last


def assert_same(a: TensorDict, b: TensorDict) -> None:
    assert a.batch_size == b.batch_size and set(a.keys(True, True)) == set(b.keys(True, True))
    for k in a.keys(True, True):
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def random_ends(B: int, W: int, seed: int) -> torch.Tensor:
    """``[B, W]`` episode ends (1 terminated, 2 truncated), with ends at the first step (the carry's),
    at the last step and two in a row."""
    g = torch.Generator().manual_seed(seed)
    ends = torch.where(torch.rand(B, W, generator=g) < 0.15, torch.randint(1, 3, (B, W), generator=g), 0)
    ends[0, 0], ends[1, -1], ends[2, 4:6] = 1, 2, 1
    return ends


@pytest.mark.parametrize(
    "obs_shape,dtype", [((4, 10, 10), torch.bool), ((3, 5, 5), torch.uint8), ((4,), torch.float32)]
)
@pytest.mark.parametrize("n", [1, 3])
def test_packed_insert_rebuilds_the_plain_transitions(obs_shape, dtype, n):
    B, T = 5, 12
    W = T + n - 1  # the carry's n - 1 steps, then T new ones
    window = window_of(B, W, obs_shape, dtype, random_ends(B, W, seed=n), seed=n)
    plain, G, discount, last = plain_transitions(window, n, 0.9, version=17)
    priority = torch.rand(plain.shape[0])
    msg = pack_transitions(window, G, discount, last, priority, 17)
    rebuilt, p = unpack_transitions(msg)
    terminal = plain[keys.BOOTSTRAP_DISCOUNT] == 0
    assert terminal.any() and (~terminal).any()
    plain[keys.NEXT_OBSERVATION][terminal] = 0  # never read (the target multiplies it by 0), never sent
    assert_same(rebuilt, plain)
    assert torch.equal(p, priority)
    # what crossed: each observation once, a final one per truncation before the last step, the
    # actions and offsets as uint8, one version
    ends = window[keys.NEXT]
    truncated = (ends[keys.STEP_TRUNCATED] & ~ends[keys.STEP_TERMINATED])[:, :-1].sum()
    assert msg[keys.OBSERVATION].shape == (B, W, *obs_shape) and msg[FINAL].shape[0] == truncated > 0
    assert msg[keys.ACTION].dtype == msg[OFFSET].dtype == torch.uint8 and int(msg[OFFSET].max()) <= n - 1
    assert msg[keys.POLICY_VERSION].numel() == 1
    if dtype != torch.float32:  # images: about one observation per transition instead of two
        assert payload_nbytes(msg) < 0.8 * payload_nbytes(plain)


def test_a_window_whose_observations_do_not_chain_is_refused():
    window = window_of(2, 6, (4,), torch.float32, torch.zeros(2, 6, dtype=torch.long))
    window[keys.OBSERVATION][0, 3] += 1.0
    _, G, discount, last = plain_transitions(window, 3, 0.9, 0)
    with pytest.raises(ValueError, match="do not chain"):
        pack_transitions(window, G, discount, last, torch.ones(8), 0)


def test_the_shard_stores_the_plain_transitions_and_counts_the_bytes(tmp_path):
    cfg = override(
        default_config(),
        **{
            "run.logger": "none",
            "run.run_dir": str(tmp_path),
            "algo.min_replay_size": 0,
            "algo.capacity": 256,
            "algo.samples_per_insert": 0.0,
        },
    )
    roles = {0: "learner", 1: "replay"}
    hub = LocalHub(2)
    try:
        shard = ReplayServer(RoleContext(cfg, hub.endpoint(1), 1, roles, tmp_path))
        window = window_of(3, 7, (4,), torch.float32, random_ends(3, 7, seed=5), seed=5)
        plain, G, discount, last = plain_transitions(window, 3, 0.99, version=4)
        priority = torch.rand(plain.shape[0]) + 0.1
        msg = pack_transitions(window, G, discount, last, priority, 4)
        reply = hub.endpoint(0).call_sync(1, "insert", msg, 10.0)
        assert not bool(reply[keys.HELD])
        with shard.lock:
            shard._drain()
        stored = shard.store.buffer[:]
        plain[keys.NEXT_OBSERVATION][plain[keys.BOOTSTRAP_DISCOUNT] == 0] = 0
        assert_same(stored.select(*plain.keys(True, True)), plain)
        raw = shard.sampler.tree.sums[0][:15].pow(1 / cfg.algo.alpha) - cfg.algo.priority_eps
        torch.testing.assert_close(raw.float(), priority)
        assert shard.inserts.bytes == payload_nbytes(msg) + payload_nbytes(reply) and shard.inserts.frames == 15

        bad = msg.clone()
        bad[OFFSET][0, -1] = 9  # a bootstrap step past the window
        hub.endpoint(0).call_sync(1, "insert", bad, 10.0)
        with shard.lock:
            shard._drain()
        assert shard.counts["rejected"] == 1 and len(shard.store) == 15

        client = ShardedReplayClient(hub.endpoint(0), [1], 10.0, 0, lambda r, why: None)
        batch = client.collect(client.request(8), beta=1.0)
        client.stats_now()
        inserted, frames, sampled = client.wire_totals()
        assert (
            inserted == shard.inserts.bytes
            and frames == 30
            and sampled >= payload_nbytes(batch.exclude(keys.PRIORITY_WEIGHT, keys.SAMPLE_LEAF, keys.REPLAY_SHARD))
        )
    finally:
        hub.close()


@pytest.mark.parametrize("length,end", [(8, "terminated"), (100, "truncated")])
def test_a_minatar_step_costs_its_observation_plus_64_bytes(length, end):
    """The preset's insert and parameter pulls per env step, against the bound ``400 + 64``, for
    episodes that terminate every 8 steps (untrained Breakout's) and, harder, that a time limit
    truncates every 100 (each sends its final observation; MinAtar's limit is 10,000); and the
    bytes, counted by hand."""
    cfg = minatar()
    a, info = cfg.algo, env_info(cfg.run.env)
    B, T, n = a.envs_per_actor, a.unroll_length, a.n_step
    W = T + n - 1
    ends = torch.zeros(B, W, dtype=torch.long)
    for b in range(B):  # episodes of `length` steps, each env at its own phase
        ends[b, (torch.arange(W) + 7 * b) % length == length - 1] = 1 if end == "terminated" else 2
    window = window_of(B, W, info.shape, info.obs_dtype, ends)
    _, G, discount, last = plain_transitions(window, n, a.gamma, 0)
    msg = pack_transitions(window, G, discount, last, torch.rand(B * T), 0)
    obs = 400  # [4, 10, 10] bool
    finals = int((ends[:, :-1] == 2).sum())
    assert (finals > 0) == (end == "truncated")
    by_hand = (
        B * (W + 1) * obs  # the window's observations and the one after its last step
        + B * T * (1 + 4 + 4 + 4 + 1)  # uint8 action, return, discount, priority, uint8 offset
        + finals * (obs + 8)
        + 8
    )  # truncated episodes' final observations and int64 indices; the version
    assert payload_nbytes(msg) == by_hand
    insert = (payload_nbytes(msg) + 2) / (B * T)  # the reply: held, stop
    net = QNetwork(info.shape, info.num_actions, cfg.net)
    params = sum(t.numel() * t.element_size() for t in net.state_dict().values()) / a.params_interval_frames
    assert insert + params <= obs + 64, (insert, params)
