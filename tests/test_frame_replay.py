"""Ape-X with frame stacks (Atari): the insert carries each frame once and gives back the plain
transitions exactly; the replay shard keeps each frame once in a ring beside the transitions,
samples the very stacks that went in, kills (never mis-serves) a transition whose frames the ring
has overwritten, checkpoints it all, and stays under 8 KiB a transition of 84x84 frames."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.estimators import nstep_returns
from distrl.config import override
from distrl.data import keys
from distrl.data.wire import payload_nbytes
from distrl.recipes.apex.recipe import default as default_config
from distrl.data.transitions import STACKS, pack_transitions, unpack_frame_transitions, unpack_transitions
from distrl.runtime.context import RoleContext
from distrl.replay.frame_store import FrameReplayStore
from distrl.replay.server import ReplayServer
from distrl.replay.sum_tree import SumTreeSampler
from distrl.transport.local import LocalHub
from tests.test_apex_wire import assert_same, plain_transitions, random_ends


def stacked_window(B: int, W: int, ends: torch.Tensor, K: int = 4, shape=(6, 6), seed: int = 0) -> TensorDict:
    """A ``[B, W]`` window of frame stacks stepped the slow way: each step shows one new frame, a
    reset starts a zero-padded stack (``ends [B, W]``: 0 on, 1 terminated, 2 truncated)."""
    g = torch.Generator().manual_seed(seed)
    draw = lambda: torch.randint(1, 256, (B, 1, *shape), generator=g, dtype=torch.uint8)  # noqa: E731
    fresh = lambda: torch.cat([torch.zeros(B, K - 1, *shape, dtype=torch.uint8), draw()], 1)  # noqa: E731
    obs, next_obs = torch.empty(W, B, K, *shape, dtype=torch.uint8), torch.empty(W, B, K, *shape, dtype=torch.uint8)
    term, trunc = (ends == 1).T, (ends == 2).T
    current = fresh()
    for t in range(W):
        obs[t], next_obs[t] = current, torch.cat([current[:, 1:], draw()], 1)
        current = torch.where((term[t] | trunc[t]).view(B, 1, 1, 1), fresh(), next_obs[t])
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


def message(B: int, T: int, n: int = 3, shape=(6, 6), seed: int = 0, p_end: float = 0.15):
    """``(frame-stack insert, plain transitions as stored)`` of one ``[B, T + n - 1]`` window."""
    W = T + n - 1
    ends = random_ends(B, W, seed) if p_end else torch.zeros(B, W, dtype=torch.long)
    window = stacked_window(B, W, ends, shape=shape, seed=seed)
    plain, G, discount, last = plain_transitions(window, n, 0.9, version=seed)
    plain[keys.NEXT_OBSERVATION][plain[keys.BOOTSTRAP_DISCOUNT] == 0] = 0
    priority = torch.rand(plain.shape[0]) + 0.1
    return pack_transitions(window, G, discount, last, priority, seed, frames=True), plain


@pytest.mark.parametrize("n", [1, 3])
def test_the_frame_insert_rebuilds_the_plain_transitions(n):
    msg, plain = message(5, 12, n, seed=n)
    assert keys.OBSERVATION not in msg.keys()
    rebuilt, _ = unpack_transitions(msg)
    assert_same(rebuilt, plain)
    bad = msg.clone()
    bad[STACKS] = bad[STACKS][1:]
    with pytest.raises(ValueError):
        unpack_frame_transitions(bad)


def fill(store: FrameReplayStore, messages: int, B: int = 4, T: int = 8, seed: int = 0) -> list[TensorDict]:
    """Insert ``messages`` windows; returns what each slot should hold (the latest write wins)."""
    slots: list = [None] * store.capacity
    written = 0
    for m in range(messages):
        msg, plain = message(B, T, seed=seed + m)
        frames, tr, priority = unpack_frame_transitions(msg)
        assert store.extend(tr, priority, frames)
        for i in range(plain.shape[0]):
            slots[(written + i) % store.capacity] = plain[i]
        written += plain.shape[0]
    return slots


def check_samples(store: FrameReplayStore, slots: list, n: int = 256) -> torch.Tensor:
    batch = store.sample(n)
    for item in batch:
        want = slots[int(item[keys.REPLAY_INDEX])]
        assert torch.equal(item[keys.OBSERVATION], want[keys.OBSERVATION])
        assert torch.equal(item[keys.NEXT_OBSERVATION], want[keys.NEXT_OBSERVATION])
        assert torch.equal(item[keys.ACTION], want[keys.ACTION])
    return batch


def test_the_store_serves_the_stacks_that_went_in_and_checkpoints_them():
    store = FrameReplayStore(100, sampler=SumTreeSampler(100), frame_room=4.0)
    slots = fill(store, 6)  # 192 transitions into 100 slots: the FIFO wrapped
    assert len(store) == 100 and not store.dead.any()
    check_samples(store, slots)
    again = FrameReplayStore(100, sampler=SumTreeSampler(100), frame_room=4.0)
    again.load_state_dict(store.state_dict())
    again.sampler.load_state_dict(store.sampler.state_dict())
    check_samples(again, slots)


def test_a_transition_whose_frames_were_overwritten_is_never_served():
    store = FrameReplayStore(100, sampler=SumTreeSampler(100), frame_room=1.5)  # over 2 frames a transition come
    slots = fill(store, 9)
    dead = store.dead.nonzero().squeeze(1)
    assert dead.numel() and len(store) == 100 - dead.numel()
    assert torch.all(store.sampler.tree[dead] == 0) and torch.isfinite(store.sampler.tree.min)
    batch = check_samples(store, slots, 512)
    assert not store.dead[batch[keys.REPLAY_INDEX]].any()
    gen = store.writer.generations_of(dead)
    assert store.update_priority(dead, gen, torch.ones(dead.shape)) == 0  # a late update does not revive it
    assert torch.all(store.sampler.tree[dead] == 0)
    _, tr, priority = unpack_frame_transitions(message(3, 4, seed=99)[0])
    assert not store.extend(tr, priority) and store.rejected == 1  # transitions without their frames


def test_the_shard_keeps_frames_once_and_restores_them(tmp_path):
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
    roles = {0: "learner", 1: "replay", 2: "replay"}
    hub = LocalHub(3)
    try:
        shard = ReplayServer(RoleContext(cfg, hub.endpoint(1), 1, roles, tmp_path))
        msg, plain = message(3, 10)
        reply = hub.endpoint(0).call_sync(1, "insert", msg, 10.0)
        assert not bool(reply[keys.HELD])
        with shard.lock:
            shard._drain()
        assert isinstance(shard.store, FrameReplayStore) and len(shard.store) == plain.shape[0]
        got = hub.endpoint(0).call_sync(1, "sample", TensorDict({keys.SAMPLE_N: torch.tensor(16)}), 10.0)
        tr = got[keys.TRANSITIONS]
        assert_same(tr.select(*plain.keys(True, True)), plain[tr[keys.REPLAY_INDEX]])
        state = hub.endpoint(0).call_sync(1, "replay_state", None, 10.0)
        other = ReplayServer(RoleContext(cfg, hub.endpoint(2), 2, roles, tmp_path))
        hub.endpoint(0).call_sync(2, "load_replay_state", state, 10.0)
        assert isinstance(other.store, FrameReplayStore) and len(other.store) == plain.shape[0]
        tr = other.store.sample(32)
        assert_same(tr.select(*plain.keys(True, True)), plain[tr[keys.REPLAY_INDEX]])
        applied = hub.endpoint(0).call_sync(
            2,
            "update_priorities",
            TensorDict(
                {
                    keys.REPLAY_INDEX: tr[keys.REPLAY_INDEX],
                    keys.REPLAY_GENERATION: tr[keys.REPLAY_GENERATION],
                    keys.PRIORITY: torch.ones(32),
                }
            ),
            10.0,
        )
        assert int(applied[keys.PRIORITIES_APPLIED]) == 32
    finally:
        hub.close()


def atari_stream(B: int = 8, T: int = 64, n: int = 3, K: int = 4, shape=(84, 84), seed: int = 0):
    """Insert messages as the atari preset's actor cuts them (8 envs, unrolls of 64, n = 3: each
    window carries the last ``n - 1`` steps of the one before) from one episode per env of random
    frames, zero-padded at its start: a faithful synthetic stream, vectorised."""
    g = torch.Generator().manual_seed(seed)
    stream = torch.zeros(B, K - 1, *shape, dtype=torch.uint8)  # the padding before the first frame
    step, version, new = 0, 0, T + 1
    while True:
        stream = torch.cat([stream, torch.randint(0, 256, (B, new, *shape), generator=g, dtype=torch.uint8)], 1)
        stacks = stream.unfold(1, K, 1).movedim(-1, 2)  # [B, steps + 1, K, *F]: step s shows frames s..s+K-1
        lo = max(step - (n - 1), 0)
        obs, next_obs = stacks[:, lo : step + T], stacks[:, lo + 1 : step + T + 1]
        W = obs.shape[1]
        zeros = torch.zeros(B, W, 1, dtype=torch.bool)
        window = TensorDict(
            {
                keys.OBSERVATION: obs,
                keys.ACTION: torch.randint(0, 6, (B, W), generator=g),
                keys.NEXT: TensorDict(
                    {
                        keys.OBSERVATION: next_obs,
                        keys.STEP_TERMINATED: zeros,
                        keys.STEP_TRUNCATED: zeros,
                        keys.STEP_REWARD: torch.randn(B, W, 1, generator=g),
                    },
                    [B, W],
                ),
            },
            [B, W],
        )
        G, discount, last = nstep_returns(window[keys.REWARD][..., 0], zeros[..., 0], zeros[..., 0], 0.99, n)
        yield pack_transitions(window, G, discount, last, torch.rand(G.numel(), generator=g), version, frames=True)
        step += T
        stream = stream[:, -(n - 1 + K) :]  # what the next window needs of the past
        step, version, new = n - 1, version + 1, T


def test_atari_shaped_transitions_cost_under_8_kib():
    """5k transitions of 84x84 frames: the whole store (frame ring with its room, transitions, frame
    ids, priorities, bookkeeping) per transition, and the insert's bytes per env step."""
    capacity = 5_000
    store = FrameReplayStore(capacity, sampler=SumTreeSampler(capacity))
    wire = steps = 0
    for msg in atari_stream():
        if store.inserted >= 2 * capacity:  # full, and wrapped once
            break
        wire, steps = wire + payload_nbytes(msg), steps + msg[keys.PRIORITY].shape[0]
        frames, tr, priority = unpack_frame_transitions(msg)
        assert store.extend(tr, priority, frames)
    per = store.nbytes() / len(store)
    print(
        f"replay: {per:.0f} bytes per transition ({store.nbytes() / 2**20:.1f} MiB for {len(store)}); "
        f"insert wire {wire / steps:.0f} bytes per env step; {store.written / store.inserted:.3f} frames stored "
        "per transition"
    )
    # the oldest windows' first steps read frames of the window before (about one message back): at 5k
    # transitions the ring's 5% room is half a message, so a few of the oldest die a little early
    assert len(store) >= 0.99 * capacity
    assert per < 8 * 1024
    assert wire / steps < 7056 * (1 + 6 / 64) + 64  # each window's first stacks whole, the carried steps again
