"""The pieces every continuous-action recipe shares: the Gaussian head (distrl/nn/heads.py) against
``torch.distributions``, its bound treatment, observation normalisation (distrl/nn/obs_norm.py) merged
across actors and across real processes, and its statistics surviving a checkpoint. Each recipe's
own path has its own file (tests/test_{impala,seed,sf,a3c}_continuous.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from distrl.runtime.checkpoint import load_latest_checkpoint, save_checkpoint
from distrl.config import NetConfig
from distrl.envs.gym import make_vector_env
from distrl.nn.heads import LOG_STD_MAX, LOG_STD_MIN, CategoricalHead, GaussianHead
from distrl.nn.models import ActorCritic
from distrl.nn.obs_norm import ObsNorm, batch_moments, merge_moments


@pytest.mark.parametrize("log_std", ["param", "state"])
def test_gaussian_log_prob_and_entropy_equal_torch_distributions(log_std):
    torch.manual_seed(0)
    model = ActorCritic(5, None, NetConfig(log_std=log_std, init_log_std=-0.7), action_dim=3)
    obs = torch.randn(4, 7, 5)
    g = torch.Generator().manual_seed(1)
    action, log_prob = model.act(obs, g)
    assert action.shape == (4, 7, 3) and action.dtype == torch.float32 and log_prob.shape == (4, 7)
    out, value = model(obs)
    mean, log_std_out = model.head.split(out)
    normal = Normal(mean, log_std_out.exp())
    torch.testing.assert_close(log_prob, normal.log_prob(action).sum(-1), rtol=1e-5, atol=1e-5)
    lp, ent, v = model.evaluate(obs, action)
    torch.testing.assert_close(lp, normal.log_prob(action).sum(-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, normal.entropy().sum(-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(v, value.squeeze(-1))
    torch.testing.assert_close(model.greedy(obs), mean)
    assert (log_std_out >= LOG_STD_MIN).all() and (log_std_out <= LOG_STD_MAX).all()
    if log_std == "param":  # state-independent: one vector, its initial value everywhere
        torch.testing.assert_close(log_std_out, torch.full_like(log_std_out, -0.7))
    lp.sum().backward()  # the log-std learns through the log-probability
    assert all(p.grad is not None for p in model.policy.parameters() if p.requires_grad)


def test_the_categorical_head_equals_torch_distributions():
    logits = torch.randn(6, 4)
    action = torch.tensor([0, 1, 2, 3, 0, 1])
    head = CategoricalHead(4)
    lp, ent = head.log_prob_entropy(logits, action)
    torch.testing.assert_close(lp, Categorical(logits=logits).log_prob(action))
    torch.testing.assert_close(ent, Categorical(logits=logits).entropy())


def test_actions_are_clipped_at_the_env_and_the_log_prob_is_of_the_unclipped_sample():
    """The bound treatment (distrl/nn/heads.py): the env clips; the learner scores what was drawn."""
    env = make_vector_env("Pendulum-v1", 2, seed=0)  # torque in [-2, 2]
    try:
        env.reset(seed=0)
        wild = np.array([[50.0], [-50.0]], dtype=np.float32)
        assert isinstance(env.single_action_space, gym.spaces.Box)
        _, r_wild, *_ = env.step(wild)
        env.reset(seed=0)
        _, r_edge, *_ = env.step(np.clip(wild, -2.0, 2.0))
        np.testing.assert_allclose(r_wild, r_edge)  # the env saw the clipped torque
    finally:
        env.close()
    head = GaussianHead(1)
    out = torch.tensor([[0.0, 0.0]])  # mean 0, std 1
    lp = head.log_prob(out, torch.tensor([[50.0]]))
    torch.testing.assert_close(lp, Normal(0.0, 1.0).log_prob(torch.tensor([50.0])))  # not the clipped 2.0's


def test_merged_statistics_equal_those_of_the_concatenated_data():
    """Every actor's moments merged at the learner (Chan et al.) = one pass over all the data."""
    g = torch.Generator().manual_seed(3)
    parts = [
        torch.randn(n, 4, generator=g, dtype=torch.float64) * torch.tensor([0.01, 1.0, 30.0, 3.0]) + 5
        for n in (3, 128, 1000, 41)
    ]
    norm = ObsNorm(4)
    for x in parts:  # in any order, in any grouping: the merge is associative
        norm.update_batch(x)
    every = torch.cat(parts)
    # the prior (var 1 at weight 1e-4) and float32 storage bound the difference
    torch.testing.assert_close(norm.mean.double(), every.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(norm.var.double(), every.var(0, unbiased=False), rtol=1e-4, atol=1e-5)
    assert float(norm.count) == pytest.approx(len(every), abs=1e-3)
    # summed moments of two actors, merged once = each merged in turn
    both = ObsNorm(4)
    both.update_moments(
        batch_moments(parts[0]) + batch_moments(parts[1]) + batch_moments(parts[2]) + batch_moments(parts[3])
    )
    torch.testing.assert_close(both.mean, norm.mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(both.var, norm.var, rtol=1e-4, atol=1e-5)


RANK_DATA = {0: ((12, 25), 5.0, (0.01, 1.0, 30.0, 3.0)), 1: ((7, 11), -2.0, (2.0, 0.5, 4.0, 0.001))}


def rank_observations(rank: int) -> torch.Tensor:
    """Rank ``rank``'s rollout observations ``[T, B, F]`` (float32, as a learner's buffer holds them):
    different sizes, means and spreads on the two ranks."""
    shape, offset, scale = RANK_DATA[rank]
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(*shape, 4, generator=g) * torch.tensor(scale) + offset


def _merge_on_rank(rank: int, world: int, store: str, out: str) -> None:
    """A forked rank: its own observations through vecenv's merge (an all-reduce of the moments on a
    gloo group), then the statistics it ends with, saved for the test."""
    import torch.distributed as dist
    from types import SimpleNamespace

    from distrl.recipes.vecenv.learner import VecEnvLearner

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        learner = SimpleNamespace(
            buf=SimpleNamespace(obs=rank_observations(rank)), world=world, model=SimpleNamespace(obs_norm=ObsNorm(4))
        )
        VecEnvLearner._update_obs_norm(learner)
        norm = learner.model.obs_norm
        torch.save({k: getattr(norm, k).detach().clone() for k in ("count", "mean", "var")}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_statistics_merged_across_two_processes_equal_those_of_the_concatenated_data(tmp_path, no_leaked_processes):
    """Two real processes on a gloo group, each with its own observations, merge them as vecenv's
    learner does; both end with the statistics of ``torch.cat`` of all the data.

    Tolerance, from the arithmetic: the prior (count ``c0 = 1e-4``, mean 0, var 1) moves the mean by
    ``c0 |m| / N`` and the variance by at most ``c0 (|1 - v| + m^2) / N``; float32 storage rounds each
    to within ``2^-24`` of itself (the moments are summed and merged in float64)."""
    import torch.multiprocessing as mp

    # forked, not spawned: the ranks start with this process's modules imported (spawned ones import
    # torch and torchrl again: 22 s against 2 on a loaded 2-core machine); each sets one torch thread first
    mp.start_processes(
        _merge_on_rank, args=(2, str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True, start_method="fork"
    )
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for name in ("count", "mean", "var"):
        assert torch.equal(got[0][name], got[1][name]), name  # one all-reduce: the same on both ranks
    every = torch.cat([rank_observations(r).reshape(-1, 4) for r in range(2)]).double()
    N, m, v = every.shape[0], every.mean(0), every.var(0, unbiased=False)
    c0, u = 1e-4, 2.0**-24
    mean_tol = c0 * m.abs() / N + u * m.abs()
    var_tol = c0 * ((1 - v).abs() + m.square()) / N + u * v
    count, mean, var = (got[0][k].double() for k in ("count", "mean", "var"))
    assert abs(float(count) - N) <= c0 + u * N
    assert ((mean - m).abs() <= 2 * mean_tol).all(), (mean - m).abs() / mean_tol
    assert ((var - v).abs() <= 2 * var_tol).all(), (var - v).abs() / var_tol
    # not one rank's statistics alone: a merge that skipped the other rank is far outside the bounds
    own = rank_observations(0).reshape(-1, 4).double()
    assert ((own.mean(0) - m).abs() > 1000 * mean_tol).all() and (
        (own.var(0, unbiased=False) - v).abs() > 1000 * var_tol
    ).all()


def test_merge_moments_is_the_pooled_population_variance():
    a, b = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64), torch.tensor([10.0, -3.0], dtype=torch.float64)
    n, m, v = merge_moments(
        torch.tensor(3.0), a.mean(), a.var(unbiased=False), torch.tensor(2.0), b.mean(), b.var(unbiased=False)
    )
    ab = torch.cat([a, b])
    assert (
        float(n) == 5
        and float(m) == pytest.approx(float(ab.mean()))
        and float(v) == pytest.approx(float(ab.var(unbiased=False)))
    )


def test_normalisation_is_part_of_the_parameters_and_survives_a_checkpoint(tmp_path):
    """Frozen parameters: in ``parameters()`` (a flat parameter vector carries them), never in an
    optimizer step, and in the state dict a checkpoint and --resume read back."""
    torch.manual_seed(5)
    model = ActorCritic(3, None, NetConfig(), action_dim=2)
    norm = model.obs_norm
    assert norm is not None and not norm.mean.requires_grad
    norm.update_batch(torch.randn(64, 3) * 4 + 1)
    flat = torch.nn.utils.parameters_to_vector(model.parameters())
    fresh = ActorCritic(3, None, NetConfig(), action_dim=2)
    torch.nn.utils.vector_to_parameters(flat, fresh.parameters())
    torch.testing.assert_close(fresh.obs_norm.mean, norm.mean)  # the flat vector sf and a3c ship
    optim = torch.optim.Adam(model.parameters(), lr=0.1)
    before = norm.mean.clone()
    model.evaluate(torch.randn(8, 3), torch.randn(8, 2))[0].sum().backward()
    optim.step()
    torch.testing.assert_close(norm.mean, before)  # the optimizer leaves the statistics alone
    save_checkpoint(tmp_path, 1, {"model": model.state_dict()})
    back = ActorCritic(3, None, NetConfig(), action_dim=2)
    back.load_state_dict(load_latest_checkpoint(tmp_path)["model"])
    for name in ("count", "mean", "var"):
        torch.testing.assert_close(getattr(back.obs_norm, name), getattr(norm, name))
    obs = torch.randn(5, 3)
    torch.testing.assert_close(back.greedy(obs), model.greedy(obs))


def test_obs_norm_is_on_for_flat_continuous_by_default_and_for_images_when_asked():
    assert ActorCritic(4, None, NetConfig(), action_dim=1).obs_norm is not None
    assert ActorCritic(4, 2, NetConfig()).obs_norm is None  # discrete: as every earlier release
    assert ActorCritic(4, 2, NetConfig(obs_norm="on")).obs_norm is not None
    assert ActorCritic(4, None, NetConfig(obs_norm="off"), action_dim=1).obs_norm is None
    assert ActorCritic((4, 10, 10), None, NetConfig(), action_dim=2).obs_norm is None  # auto: 1/255
    assert ActorCritic((4, 10, 10), 3, NetConfig(obs_norm="on")).obs_norm.mean.shape == (4, 10, 10)


def test_images_are_standardised_pixel_by_pixel_from_their_raw_values():
    """``net.obs_norm=on`` over uint8 images: statistics per pixel and channel over 0-255, merged
    from a quarter of each batch as the learner folds them; the output is what the formula gives and
    reaches the encoder as floats (not divided by 255 again)."""
    from distrl.nn.obs_norm import fold_observations

    g = torch.Generator().manual_seed(0)
    model = ActorCritic((2, 9, 9), 3, NetConfig(obs_norm="on", encoder="minatar"))
    obs = torch.randint(0, 256, (8, 5, 2, 9, 9), generator=g, dtype=torch.uint8)
    obs[..., 0, 0] = 7  # a constant pixel: variance ~0, standardised to ~0
    fold_observations(model.obs_norm, obs)
    seen = obs.reshape(-1, 2, 9, 9)[::4].double()
    # the running statistics start from a count of 1e-4 (mean 0, var 1): 1e-4 / 10 relative at 10 frames
    torch.testing.assert_close(model.obs_norm.mean.double(), seen.mean(0), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(model.obs_norm.var.double(), seen.var(0, unbiased=False), rtol=1e-4, atol=1e-2)
    x = obs[0]
    want = ((x.float() - model.obs_norm.mean) / (model.obs_norm.var + 1e-8).sqrt()).clamp(-10, 10)
    torch.testing.assert_close(model.obs_norm(x), want)
    # the constant pixel: ~0 (the prior's count of 1e-4 leaves its mean 7e-5 off, its variance ~1e-5)
    assert model.obs_norm(x)[..., 0, 0].abs().max() < 0.1 and model.obs_norm(x).dtype == torch.float32
    out, value = model(obs)
    assert out.shape == (8, 5, 3) and value.shape == (8, 5, 1)
