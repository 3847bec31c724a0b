"""The compact wire form of a trajectory gives back the trajectory leaf for leaf (but for the next
observation of a terminated step, which nothing reads), and is smaller."""

import pytest
import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.data.compact import pack_trajectory, unpack_trajectory
from distrl.data.wire import payload_nbytes


def rollout(B, T, obs_shape, dtype, seed=0, p_end=0.1, versions=None):
    """A [B, T] trajectory stepped the slow way: obs[t + 1] is next_obs[t] unless the episode ended."""
    g = torch.Generator().manual_seed(seed)
    draw = (
        (lambda: torch.rand(B, *obs_shape, generator=g) < 0.5)
        if dtype == torch.bool
        else (
            (lambda: torch.randint(0, 256, (B, *obs_shape), generator=g, dtype=torch.uint8))
            if dtype == torch.uint8
            else (lambda: torch.randn(B, *obs_shape, generator=g))
        )
    )
    obs = torch.empty(T, B, *obs_shape, dtype=dtype)
    next_obs = torch.empty_like(obs)
    term = torch.rand(T, B, generator=g) < p_end / 2
    trunc = (torch.rand(T, B, generator=g) < p_end / 2) & ~term
    current = draw()
    for t in range(T):
        obs[t] = current
        next_obs[t] = draw()  # the true next (final, where the episode ended) observation
        done = term[t] | trunc[t]
        current = torch.where(done.view(B, *[1] * len(obs_shape)), draw(), next_obs[t])  # a reset where done
    version = versions if versions is not None else torch.full((T, B), 7, dtype=torch.int64)
    td = TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: torch.randint(0, 6, (T, B), generator=g),
            keys.ACTION_LOG_PROB: torch.randn(T, B, generator=g),
            keys.POLICY_VERSION: version,
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


def assert_same(got: TensorDict, sent: TensorDict):
    """``got`` equals ``sent`` leaf for leaf, except where ``sent`` terminated: there the next
    observation is the following step's (the reset observation), or the bootstrap at the end."""
    assert set(got.keys(True, True)) == set(sent.keys(True, True))
    terminated = sent[keys.TERMINATED][..., 0].clone()
    terminated[:, -1] = False  # the last step's next observation is the bootstrap: always sent
    for k in sent.keys(True, True):
        assert got[k].dtype == sent[k].dtype and got[k].shape == sent[k].shape, k
        if k == keys.NEXT_OBSERVATION:
            assert torch.equal(got[k][~terminated], sent[k][~terminated]), k
            assert torch.equal(got[k][:, :-1][terminated[:, :-1]], sent[keys.OBSERVATION][:, 1:][terminated[:, :-1]])
        else:
            assert torch.equal(got[k], sent[k]), k


@pytest.mark.parametrize(
    "obs_shape,dtype", [((4,), torch.float32), ((4, 10, 10), torch.bool), ((1, 84, 84), torch.uint8)]
)
@pytest.mark.parametrize("T", [1, 2, 20])
def test_round_trip(obs_shape, dtype, T):
    traj = rollout(5, T, obs_shape, dtype, seed=T, p_end=0.3)
    assert_same(unpack_trajectory(pack_trajectory(traj)), traj)


def test_versions_that_differ_travel_per_step():
    versions = torch.arange(40).view(20, 2)
    traj = rollout(2, 20, (4, 10, 10), torch.bool, versions=versions)
    packed = pack_trajectory(traj)
    assert keys.POLICY_VERSION in packed["traj"].keys()
    assert_same(unpack_trajectory(packed), traj)


def test_an_image_crosses_the_wire_once_per_step():
    B, T, obs_bytes = 32, 20, 4 * 10 * 10
    traj = rollout(B, T, (4, 10, 10), torch.bool, p_end=0.01)
    per_step = payload_nbytes(pack_trajectory(traj)) / (B * T)
    # the observation, one bootstrap per env every T steps, the few finals; then action (1 byte),
    # log prob and reward (4 each), terminated and truncated (1 each), one index (8) per final
    ends = int((traj[keys.TRUNCATED] & ~traj[keys.TERMINATED])[:, :-1].sum())  # only truncations send a final
    assert per_step == pytest.approx(obs_bytes + obs_bytes / T + ends * (obs_bytes + 8) / (B * T) + 11 + 8 / (B * T))
    assert per_step < obs_bytes + 64
    assert payload_nbytes(traj) / (B * T) > 2 * obs_bytes  # the plain form: every observation twice


def test_parts_that_do_not_fit_are_refused():
    packed = pack_trajectory(rollout(3, 8, (4, 10, 10), torch.bool, p_end=0.5))
    bad = packed.clone()
    bad["bootstrap"] = bad["bootstrap"].float()
    with pytest.raises(ValueError, match="bootstrap"):
        unpack_trajectory(bad)
    bad = packed.clone()
    bad["final_index"] = torch.full_like(bad["final_index"], 3 * 8)
    assert bad["final_index"].numel()
    with pytest.raises(ValueError, match="final observations"):
        unpack_trajectory(bad)
