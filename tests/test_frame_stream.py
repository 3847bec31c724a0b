"""distrl/data/frame_stream.py: a frame stack crosses one new frame per step and is rebuilt exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distrl.data.frame_stream import FINAL_FULL, FRAME, FULL_INDEX, StackReceiver, StackSender
from distrl.data.wire import payload_nbytes


def _stream(steps: int, B: int = 3, K: int = 4, side: int = 5, seed: int = 0):
    """A made-up stream of stacks with resets (zero-padded, as ale-py's) and true final stacks:
    yields ``(obs [B, K, S, S], done [B], final [D, K, S, S])`` per step."""
    g = torch.Generator().manual_seed(seed)
    new = lambda n: torch.randint(1, 255, (n, side, side), generator=g, dtype=torch.uint8)  # noqa: E731
    stacks = torch.zeros(B, K, side, side, dtype=torch.uint8)
    stacks[:, -1] = new(B)
    yield stacks.clone(), torch.zeros(B, dtype=torch.bool), stacks[:0].clone()
    for _ in range(steps):
        stacks = torch.cat([stacks[:, 1:], new(B).unsqueeze(1)], 1)
        done = torch.rand(B, generator=g) < 0.2
        final = stacks[done].clone()
        stacks[done] = 0
        stacks[done, -1] = new(int(done.sum()))
        yield stacks.clone(), done, final


def test_the_receiver_rebuilds_every_stack_and_final_stack():
    sender, receiver = StackSender(), StackReceiver()
    for obs, done, final in _stream(200):
        msg = sender.encode(obs, done, final)
        got, got_final = receiver.decode(msg, done)
        assert torch.equal(got, obs) and torch.equal(got_final, final)


def test_only_new_frames_cross_within_an_episode():
    sender = StackSender()
    obs, done, final = next(_stream(0))
    first = sender.encode(obs, done, final)
    assert len(first[FULL_INDEX]) == 3  # a first message: every stack whole
    nxt = torch.cat([obs[:, 1:], obs[:, -1:] + 1], 1)
    msg = sender.encode(nxt, torch.zeros(3, dtype=torch.bool), obs[:0])
    assert len(msg[FULL_INDEX]) == 0 and torch.equal(msg[FRAME], nxt[:, -1])


def test_a_receiver_refuses_a_stream_it_did_not_see_start():
    sender = StackSender()
    stream = _stream(3)
    sender.encode(*next(stream))
    obs, done, final = next(stream)
    with pytest.raises(ValueError, match="first message"):
        StackReceiver().decode(sender.encode(obs, done, final), done)


def test_non_stacked_images_cross_whole_and_still_match():
    """The check is on the data: channels that are not a time stack (MinAtar) just go whole."""
    g = torch.Generator().manual_seed(1)
    sender, receiver = StackSender(), StackReceiver()
    for _ in range(5):
        obs = torch.rand(4, 4, 10, 10, generator=g) < 0.5
        done = torch.zeros(4, dtype=torch.bool)
        msg = sender.encode(obs, done, obs[:0])
        assert torch.equal(receiver.decode(msg, done)[0], obs)
        assert len(msg[FULL_INDEX]) == 4 and len(msg[FINAL_FULL]) == 0


def test_atari_frames_cost_one_frame_per_env_step():
    """Real Pong through ale-py's vector env: about 7,056 bytes an env step instead of 28,224."""
    pytest.importorskip("ale_py")
    from distrl.envs.gym import final_observations, make_vector_env

    B, steps = 4, 200
    env = make_vector_env("ALE/Pong-v5", B, 0)
    obs, _ = env.reset(seed=0)
    sender, receiver = StackSender(), StackReceiver()
    done = torch.zeros(B, dtype=torch.bool)
    sent, info, d = 0, {}, None  # the step's outcome: none before the first step
    for t in range(steps + 1):
        obs_t = torch.from_numpy(obs)
        final = obs_t[:0] if t == 0 else torch.from_numpy(final_observations(obs, info, d)[d])
        msg = sender.encode(obs_t, done, final)
        got, got_final = receiver.decode(msg, done)
        assert torch.equal(got, obs_t) and torch.equal(got_final, final)
        if t:
            sent += sum(payload_nbytes_of(v) for v in msg.values())
        obs, _, term, trunc, info = env.step(np.random.default_rng(t).integers(6, size=B))
        d = term | trunc
        done = torch.from_numpy(d)
    env.close()
    per_step = sent / (steps * B)
    assert 7056 <= per_step < 7056 + 64, per_step


def payload_nbytes_of(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def test_payload_counts_the_same_bytes():
    """The wire meter (distrl.data.wire.payload_nbytes) counts a message's tensors as above."""
    from tensordict import TensorDict

    obs, done, final = next(_stream(0))
    msg = StackSender().encode(obs, done, final)
    assert payload_nbytes(TensorDict(msg)) == sum(payload_nbytes_of(v) for v in msg.values())
