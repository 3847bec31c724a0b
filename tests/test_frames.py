"""Frame stacks cross the wire and sit in replay once per frame: the codec
(``distrl/data/frames.py``) against a slow loop, and IMPALA's frame-stack wire form
(``distrl/data/compact.py``) exact and one 84x84 frame plus at most 64 bytes per env step."""

import pytest
import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.data.compact import REF_FRAMES, attach_reference, pack_trajectory, unpack_trajectory
from distrl.data.frames import pack_stacks, unpack_stacks
from distrl.data.wire import payload_nbytes
from tests.test_compact import assert_same


def frame_stream(B: int, T: int, K: int, shape: tuple, p_end: float, seed: int = 0, dtype=torch.uint8):
    """``(obs, next_obs, terminated, truncated)``, ``[T, B]``-major, of envs that show one new frame a
    step and observe the last ``K``, zero-padded after a reset (as ``AtariVectorEnv``)."""
    g = torch.Generator().manual_seed(seed)
    draw = lambda: torch.randint(1, 256, (B, *shape), generator=g, dtype=torch.uint8).to(dtype)  # noqa: E731
    fresh = lambda: torch.cat([torch.zeros(B, K - 1, *shape, dtype=dtype), draw()[:, None]], 1)  # noqa: E731
    obs, next_obs = torch.empty(T, B, K, *shape, dtype=dtype), torch.empty(T, B, K, *shape, dtype=dtype)
    term = torch.rand(T, B, generator=g) < p_end / 2
    trunc = (torch.rand(T, B, generator=g) < p_end / 2) & ~term
    current = fresh()
    for t in range(T):
        obs[t] = current
        next_obs[t] = torch.cat([current[:, 1:], draw()[:, None]], 1)
        done = (term[t] | trunc[t]).view(B, *[1] * (len(shape) + 1))
        current = torch.where(done, fresh(), next_obs[t])
    return obs, next_obs, term, trunc


def stacked_rollout(B, T, K=4, shape=(84, 84), p_end=0.05, seed=0) -> TensorDict:
    """A ``[B, T]`` IMPALA trajectory of frame stacks (``tests/test_compact.py``'s keys)."""
    obs, next_obs, term, trunc = frame_stream(B, T, K, shape, p_end, seed)
    g = torch.Generator().manual_seed(seed + 1)
    td = TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: torch.randint(0, 6, (T, B), generator=g),
            keys.ACTION_LOG_PROB: torch.randn(T, B, generator=g),
            keys.POLICY_VERSION: torch.full((T, B), 3),
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: next_obs,
                    keys.STEP_REWARD: torch.randn(T, B, 1, generator=g),
                    keys.STEP_DONE: (term | trunc)[..., None],
                    keys.STEP_TERMINATED: term[..., None],
                    keys.STEP_TRUNCATED: trunc[..., None],
                },
                batch_size=[T, B],
            ),
        },
        batch_size=[T, B],
    )
    return td.transpose(0, 1).contiguous()


def slow_pack(obs: torch.Tensor, prev: torch.Tensor):
    """The codec in a loop: row by row, a row equal to its ``prev`` row takes its indices; one whose
    older frames are its ``prev`` row's newer ones takes theirs and stores its newest frame; any other
    row stores all its frames."""
    frames, index = [], []
    for i in range(obs.shape[0]):
        p = int(prev[i])
        if p >= 0 and torch.equal(obs[i], obs[p]):
            row = list(index[p])
        elif p >= 0 and all(torch.equal(obs[i, k], obs[p, k + 1]) for k in range(obs.shape[1] - 1)):
            row = index[p][1:] + [len(frames)]
            frames.append(obs[i, -1])
        else:
            row = list(range(len(frames), len(frames) + obs.shape[1]))
            frames.extend(obs[i])
        index.append(row)
    return torch.stack(frames), torch.tensor(index, dtype=torch.int32)


@pytest.mark.parametrize("K", [1, 2, 4])
@pytest.mark.parametrize("p_end", [0.0, 0.2, 1.0])
def test_codec_matches_the_slow_loop(K, p_end):
    obs, _, _, _ = frame_stream(3, 25, K, (5, 6), p_end, seed=K)
    seq = obs.transpose(0, 1).flatten(0, 1)  # env 0's 25 steps, then env 1's...
    prev = torch.arange(-1, seq.shape[0] - 1)
    prev[::25] = -1
    frames, index = pack_stacks(seq, prev)
    want_frames, want_index = slow_pack(seq, prev)
    assert torch.equal(frames, want_frames) and torch.equal(index, want_index) and index.dtype == torch.int32
    assert torch.equal(unpack_stacks(frames, index), seq)


def test_codec_is_lossless_whatever_the_rows():
    g = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 2, (200, 4, 1), generator=g, dtype=torch.uint8)  # chains (or repeats) by chance, or not
    frames, index = pack_stacks(obs)
    assert torch.equal(frames[index.long()], obs)
    assert torch.equal(frames, slow_pack(obs, torch.arange(-1, 199))[0])


def test_an_episode_stores_each_frame_once():
    obs, _, _, _ = frame_stream(1, 100, 4, (84, 84), 0.0)
    frames, index = pack_stacks(obs[:, 0])
    assert frames.shape[0] == 100 + 3  # the first stack whole (3 zero frames), then one new frame a step


@pytest.mark.parametrize("T", [1, 2, 20])
def test_impala_frame_form_round_trip(T):
    traj = stacked_rollout(5, T, p_end=0.3, seed=T)
    packed = pack_trajectory(traj, frames=True)
    assert keys.OBSERVATION not in packed["traj"].keys()
    assert_same(unpack_trajectory(packed), traj)


@pytest.mark.parametrize("p_end", [0.0, 0.02])
def test_impala_frame_form_chains_to_what_the_receiver_holds(p_end):
    B, T = 16, 20
    first, second = stacked_rollout(B, 2 * T, p_end=p_end).split(T, dim=1)
    ref = first[keys.NEXT_OBSERVATION][:, -1]
    packed = pack_trajectory(second, frames=True, ref=ref)
    assert int(packed[REF_FRAMES]) == B * 4
    with pytest.raises(ValueError, match="does not hold"):
        unpack_trajectory(packed)
    assert_same(unpack_trajectory(attach_reference(packed, ref)), second)
    with pytest.raises(ValueError, match="reference"):
        attach_reference(packed, ref[:-1])
    per_step = payload_nbytes(packed) / (B * T)
    # one 84x84 frame a step, amortised (Atari's B=16, T=20); an episode's end adds its reset's 3 zero
    # frames (and a truncated one its final stack): here every 50 steps, in Atari every few thousand
    assert per_step < 7056 + 64 + p_end * 7 * 7056, per_step
    print(
        f"impala frame-stack wire: {per_step:.1f} bytes per env step (whole stacks: "
        f"{payload_nbytes(pack_trajectory(second)) / (B * T):.0f})"
    )


def test_the_stream_chains_only_to_what_the_receiver_acknowledged():
    from distrl.data.compact import FrameReceiver, FrameSender

    B, T = 4, 10
    parts = stacked_rollout(B, 4 * T, shape=(6, 6), p_end=0.05).split(T, dim=1)
    sender, receiver, acked, sizes = FrameSender(), FrameReceiver(), -1, []
    for i, part in enumerate(parts):
        packed, seq = sender.pack(part, acked)
        assert int(seq) == i
        sizes.append(int(packed[REF_FRAMES]))
        if i == 2:  # a reply lost, or a receiver that restarted: the next message must not chain
            with pytest.raises(ValueError, match="does not hold"):
                FrameReceiver().attach(0, i, packed)
            acked = -1
            continue
        got = unpack_trajectory(receiver.attach(0, i, packed))
        assert_same(got, part)
        acked = int(receiver.hold(0, i, got))
    assert sizes == [0, B * 4, B * 4, 0]


def test_the_impala_learner_rebuilds_an_actors_frame_stacks_across_messages(tmp_path):
    """The actor's wire (``wire_message`` with a ``FrameSender``) into the Atari learner's handler:
    each message chains to the one the reply acknowledged, and the queue holds the stacks exactly."""
    from distrl.config import override
    from distrl.data.compact import FRAMES_ACK, FrameSender
    from distrl.runtime.context import RoleContext
    from distrl.recipes.impala import recipe as impala
    from distrl.recipes.impala.actor import wire_message
    from distrl.recipes.impala.learner import ImpalaLearner
    from distrl.transport.local import LocalHub

    hub = LocalHub(2)
    cfg = override(impala.atari(), **{"run.logger": "none", "run.eval_episodes": 0})
    learner = ImpalaLearner(RoleContext(cfg, hub.endpoint(0), 0, {0: "learner", 1: "actor"}, tmp_path))
    try:
        sender, acked, B, T = FrameSender(), -1, 4, 20
        for i, part in enumerate(stacked_rollout(B, 3 * T, p_end=0.02).split(T, dim=1)):
            msg = TensorDict(
                {
                    keys.TRAJ: part,
                    keys.PARAMS_VERSION: torch.tensor(-1),
                    keys.ENV_ERRORS: torch.tensor(0),
                    keys.EPISODE_RETURNS: torch.zeros(0),
                    keys.EPISODE_LENGTHS: torch.zeros(0, dtype=torch.int64),
                    keys.ACTOR_RANK: torch.tensor(1),
                }
            )
            wire = wire_message(msg, sender, acked)
            assert int(wire[keys.TRAJ, REF_FRAMES]) == (B * 4 if i else 0)
            acked = int(learner._put_trajectory(wire)[FRAMES_ACK])
            assert acked == i
            assert_same(learner.queue.get_nowait()[keys.TRAJ], part)
    finally:
        hub.pool.shutdown(wait=True, cancel_futures=True)
