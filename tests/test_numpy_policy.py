"""The impala actor's numpy policy (distrl/nn/numpy_policy.py) is the torch policy, faster.

Same logits as the torch MLP (to float32 rounding), the same distribution as
``sample_actions``, the log-probability of the sampled action as torch computes it, and weights
that follow the module's own parameters.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from distrl.config import NetConfig
from distrl.nn.models import ActorCritic
from distrl.nn.numpy_policy import NumpyPolicy


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    # float32, two summation orders over at most 64 terms: a few ulps of the largest partial sum
    scale = float(b.abs().max()) + 1.0
    torch.testing.assert_close(a, b, rtol=0, atol=64 * torch.finfo(torch.float32).eps * scale)


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
def test_the_logits_are_the_torch_mlps(activation):
    torch.manual_seed(0)
    model = ActorCritic(4, 3, NetConfig(hidden=(64, 64), activation=activation))
    for p in model.policy.parameters():  # larger than the init's near-zero last layer, so the test can fail
        p.data.normal_()
    obs = torch.randn(32, 4)
    with torch.no_grad():
        _close(torch.from_numpy(NumpyPolicy(model.policy, 0).logits(obs.numpy())), model.policy(obs))


def test_samples_follow_softmax_and_log_prob_is_torchs():
    model = ActorCritic(2, 3)
    with torch.no_grad():
        last = model.policy[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.0, 1.0, 2.0]))  # p = softmax([0, 1, 2]) = (0.090, 0.245, 0.665)
    fast = NumpyPolicy(model.policy, seed=1)
    obs = torch.randn(20_000, 2)
    action, log_prob = fast.act(obs)
    assert action.dtype == torch.int64 and log_prob.dtype == torch.float32 and action.shape == (20_000,)
    p = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    freq = torch.bincount(action, minlength=3).double() / len(action)
    # 5 standard errors of a frequency over 20k draws: fails by chance about once in 10^6 runs
    assert (freq - p).abs().max() < 5 * (p * (1 - p) / len(action)).sqrt().max()
    with torch.no_grad():
        expected = torch.log_softmax(model.policy(obs), -1).gather(-1, action[:, None])[:, 0]
    _close(log_prob, expected)


def test_the_weights_follow_load_state_dict_and_refresh():
    model, other = ActorCritic(4, 2), ActorCritic(4, 2)
    fast = NumpyPolicy(model.policy, 0)
    obs = torch.randn(8, 4)
    model.load_state_dict(other.state_dict())  # in place: the numpy views see it
    with torch.no_grad():
        _close(torch.from_numpy(fast.logits(obs.numpy())), other.policy(obs))
        for p in model.policy.parameters():  # a new storage: only refresh() sees it
            p.data = torch.randn_like(p)
        fast.refresh()
        _close(torch.from_numpy(fast.logits(obs.numpy())), model.policy(obs))


def test_a_network_it_cannot_run_is_refused():
    assert NumpyPolicy.supports(ActorCritic(4, 2).policy)
    odd = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    assert not NumpyPolicy.supports(odd) and not NumpyPolicy.supports(nn.Linear(4, 2))
    with pytest.raises(ValueError, match="NumpyPolicy runs Linear layers"):
        NumpyPolicy(odd, 0)


def test_the_impala_actor_acts_through_it():
    from distrl.recipes import get_recipe
    from distrl.runtime.context import RoleContext
    from distrl.recipes.impala.actor import ImpalaActor
    from distrl.transport.local import LocalHub

    cfg = get_recipe("impala").default_config()
    actor = ImpalaActor(RoleContext(cfg, LocalHub(2).endpoint(1), 1, {0: "learner", 1: "actor"}, None))
    try:
        assert actor.fast is not None
        msg = actor._unroll()
        B, T = cfg.algo.envs_per_actor, cfg.algo.unroll_length
        assert msg["traj"].batch_size == (B, T) and msg["traj"]["action"].dtype == torch.int64
        assert np.isfinite(msg["traj"]["action_log_prob"].numpy()).all()
    finally:
        actor.runner.close()
