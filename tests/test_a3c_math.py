"""A3C's n-step advantage and loss against a slow loop in the paper's notation.

Mnih et al. (2016), Algorithm S3, for one worker's segment s_{t_start}..s_t:
    R = 0 for a terminal s_t, else V(s_t; theta'_v)
    for i in t-1, ..., t_start:
        R <- r_i + gamma R
        dtheta   += grad log pi(a_i|s_i; theta') (R - V(s_i; theta'_v)) + beta grad H(pi(s_i; theta'))
        dtheta_v += d (R - V(s_i; theta'_v))^2 / d theta'_v
With a vector env running on across episodes, an episode end at step i restarts R there:
R = r_i after a termination, R = r_i + gamma V(s'_i) after a truncation (s'_i its final observation).
"""
from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.a3c import a3c_loss, n_step_advantage
from distrl.data import keys
from distrl.models import ActorCritic


def slow_returns(gamma, V_next, r, done, term):
    """R_i of one env's segment, by Algorithm S3's backward loop; lists of length T."""
    T = len(r)
    R, out = None, [0.0] * T
    for i in reversed(range(T)):
        if i == T - 1 or done[i]:  # the bootstrap: end of the segment, or an episode end at i
            R = 0.0 if term[i] else V_next[i]
        R = r[i] + gamma * R
        out[i] = R
    return out


def random_segments(B=4, T=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    V, V_next, r = (torch.randn(B, T, 1, generator=g) for _ in range(3))
    done = torch.rand(B, T, 1, generator=g) < 0.25
    term = done & (torch.rand(B, T, 1, generator=g) < 0.5)  # the other ends are truncations
    return V, V_next, r, done, term


@pytest.mark.parametrize("gamma", [0.99, 0.9, 1.0])
def test_n_step_advantage_matches_the_papers_loop(gamma):
    V, V_next, r, done, term = random_segments()
    adv, ret = n_step_advantage(gamma, V, V_next, r, done, term)
    assert adv.shape == ret.shape == (4, 9, 1)
    for b in range(V.shape[0]):
        col = lambda x: x[b, :, 0].tolist()  # noqa: E731
        R = torch.tensor(slow_returns(gamma, col(V_next), col(r), col(done), col(term)))
        torch.testing.assert_close(ret[b, :, 0], R, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(adv[b, :, 0], R - V[b, :, 0], atol=1e-5, rtol=1e-5)


def test_truncation_bootstraps_and_termination_does_not():
    """One env, T = 3, rewards 1: an end at step 0 then the segment's own end at step 2."""
    V = torch.zeros(1, 3, 1)
    V_next = torch.full((1, 3, 1), 10.0)
    r = torch.ones(1, 3, 1)
    done = torch.tensor([True, False, False]).view(1, 3, 1)
    for term0, R0 in ((False, 1 + 0.5 * 10), (True, 1.0)):
        term = torch.tensor([term0, False, False]).view(1, 3, 1)
        _, ret = n_step_advantage(0.5, V, V_next, r, done, term)
        # step 0 ends its episode; steps 1-2 bootstrap from V(s_3) = 10 at the segment's end
        torch.testing.assert_close(ret[0, :, 0], torch.tensor([R0, 1 + 0.5 * (1 + 0.5 * 10), 1 + 0.5 * 10]))


def random_batch(B=3, T=7, F=4, A=3, seed=0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(B, T, 1, generator=g) < 0.2
    return TensorDict({
        keys.OBSERVATION: torch.randn(B, T, F, generator=g),
        keys.ACTION: torch.randint(A, (B, T), generator=g),
        keys.NEXT: TensorDict({
            keys.OBSERVATION: torch.randn(B, T, F, generator=g), "reward": torch.randn(B, T, 1, generator=g),
            "done": done, "terminated": done & (torch.rand(B, T, 1, generator=g) < 0.5),
        }, batch_size=[B, T]),
    }, batch_size=[B, T])


@pytest.mark.parametrize("reward_scale", [1.0, 0.1])
def test_loss_gradient_is_algorithm_s3(reward_scale):
    """d loss / d theta = -(d theta + value_coef / 2 * d theta_v) / (B T), d theta and d theta_v
    accumulated step by step as in Algorithm S3 (with the entropy weight beta), on rewards
    multiplied by ``reward_scale``."""
    torch.manual_seed(0)
    model = ActorCritic(4, 3)
    batch = random_batch()
    gamma, vc, beta = 0.95, 0.5, 0.01
    out = a3c_loss(model, batch, gamma, vc, beta, reward_scale=reward_scale)
    grads = torch.autograd.grad(out["loss"], list(model.parameters()))

    B, T = batch.batch_size
    objective = 0.0  # sum of what Algorithm S3 ascends, minus the value regression it descends
    for b in range(B):
        logits, V = model(batch[keys.OBSERVATION][b])  # [T, A], [T, 1]
        with torch.no_grad():
            V_next = model.value(batch[keys.NEXT_OBSERVATION][b])[:, 0].tolist()
        r = (reward_scale * batch[keys.REWARD][b, :, 0]).tolist()
        R = slow_returns(gamma, V_next, r, batch[keys.DONE][b, :, 0].tolist(), batch[keys.TERMINATED][b, :, 0].tolist())
        for i in range(T):
            log_pi = torch.log_softmax(logits[i], -1)
            H = -(log_pi.exp() * log_pi).sum()
            objective = objective + log_pi[batch[keys.ACTION][b, i]] * (R[i] - V[i, 0].detach()) + beta * H
            objective = objective - vc / 2 * (R[i] - V[i, 0]) ** 2
    expected = torch.autograd.grad(-objective / (B * T), list(model.parameters()))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)
    assert set(out.keys()) == {"loss", "loss_policy", "loss_value", "entropy", "advantage_mean"}


def test_normalized_advantage_rescales_the_policy_term():
    torch.manual_seed(1)
    model = ActorCritic(4, 3)
    batch = random_batch(seed=2)
    out = a3c_loss(model, batch, 0.99, 0.5, 0.0, normalize_advantage=True)
    logits, value = model(batch[keys.OBSERVATION])
    log_pi = torch.log_softmax(logits, -1).gather(-1, batch[keys.ACTION].unsqueeze(-1))
    with torch.no_grad():
        adv, _ = n_step_advantage(0.99, value, model.value(batch[keys.NEXT_OBSERVATION]), batch[keys.REWARD],
                                  batch[keys.DONE], batch[keys.TERMINATED])
        adv = (adv - adv.mean()) / adv.std()
    torch.testing.assert_close(out["loss_policy"], -(adv * log_pi).mean().detach(), atol=1e-5, rtol=1e-5)
