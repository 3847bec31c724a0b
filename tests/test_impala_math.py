"""V-trace and the IMPALA loss against slow loops written in the paper's notation.

Espeholt et al. (2018), eq. (1): for one trajectory x_s..x_{s+n},
    v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V
    delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
with rho_t = min(rho_bar, pi/mu), c_i = min(c_bar, pi/mu). An episode end at t cuts the sum
after t; a termination also drops gamma V(x_{t+1}). The policy gradient uses
    A_s = rho_s (r_s + gamma v_{s+1} - V(x_s)), with v_{s+1} := V(x_{s+1}) at an episode end.
"""
from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.impala import impala_loss, vtrace_targets
from distrl.data import keys
from distrl.models import ActorCritic


def slow_vtrace(gamma, log_pi, log_mu, V, V_next, r, done, term, rho_bar, c_bar):
    """Per-trajectory python loops; tensors are [T] for one env."""
    T = len(r)
    ratio = [math.exp(log_pi[t] - log_mu[t]) for t in range(T)]
    rho = [min(rho_bar, x) for x in ratio]
    c = [min(c_bar, x) for x in ratio]
    delta = [rho[t] * (r[t] + gamma * (0.0 if term[t] else V_next[t]) - V[t]) for t in range(T)]
    v = []
    for s in range(T):
        total, trace = 0.0, 1.0
        for t in range(s, T):
            total += gamma ** (t - s) * trace * delta[t]
            if done[t]:
                break
            trace *= c[t]
        v.append(V[s] + total)
    adv = []
    for s in range(T):
        if done[s] or s == T - 1:
            v_next = V_next[s]
        else:
            v_next = v[s + 1]
        adv.append(rho[s] * (r[s] + gamma * (0.0 if term[s] else v_next) - V[s]))
    return adv, v


@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (0.5, 0.9), (2.0, 1.0)])
def test_vtrace_matches_slow_loop(rho_bar, c_bar):
    g = torch.Generator().manual_seed(0)
    B, T, gamma = 4, 12, 0.97
    log_pi = torch.randn(B, T, 1, generator=g) * 0.5
    log_mu = torch.randn(B, T, 1, generator=g) * 0.5
    V, V_next, r = (torch.randn(B, T, 1, generator=g) for _ in range(3))
    done = torch.rand(B, T, 1, generator=g) < 0.2
    term = done & (torch.rand(B, T, 1, generator=g) < 0.5)  # some ends are truncations
    adv, vs = vtrace_targets(gamma, log_pi, log_mu, V, V_next, r, done, term, rho_bar, c_bar)
    for b in range(B):
        col = lambda x: x[b, :, 0].tolist()  # noqa: E731
        slow_adv, slow_v = slow_vtrace(gamma, col(log_pi), col(log_mu), col(V), col(V_next), col(r),
                                       col(done), col(term), rho_bar, c_bar)
        torch.testing.assert_close(vs[b, :, 0], torch.tensor(slow_v), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(adv[b, :, 0], torch.tensor(slow_adv), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (0.5, 0.9)])
def test_vtrace_matches_torchrl(rho_bar, c_bar):
    """The hand-written scan (written for speed) gives TorchRL's ``vtrace_advantage_estimate``."""
    from torchrl.objectives.value.functional import vtrace_advantage_estimate

    g = torch.Generator().manual_seed(1)
    B, T, gamma = 16, 32, 0.99
    log_pi, log_mu = (torch.randn(B, T, 1, generator=g) * 0.5 for _ in range(2))
    V, V_next, r = (torch.randn(B, T, 1, generator=g) for _ in range(3))
    done = torch.rand(B, T, 1, generator=g) < 0.1
    term = done & (torch.rand(B, T, 1, generator=g) < 0.5)
    got = vtrace_targets(gamma, log_pi, log_mu, V, V_next, r, done, term, rho_bar, c_bar)
    want = vtrace_advantage_estimate(gamma, log_pi, log_mu, V, V_next, r, done, term, rho_thresh=rho_bar,
                                     c_thresh=c_bar, time_dim=-2)
    for a, b in zip(got, want):  # float32 sums of up to 32 terms of size ~10 in different orders
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def random_batch(B=3, T=7, F=4, A=2, seed=0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(B, T, 1, generator=g) < 0.2
    return TensorDict({
        keys.OBSERVATION: torch.randn(B, T, F, generator=g),
        keys.ACTION: torch.randint(A, (B, T), generator=g),
        keys.ACTION_LOG_PROB: -torch.rand(B, T, generator=g) - 0.3,
        keys.POLICY_VERSION: torch.zeros(B, T, dtype=torch.int64),
        keys.NEXT: TensorDict({
            keys.OBSERVATION: torch.randn(B, T, F, generator=g), "reward": torch.randn(B, T, 1, generator=g),
            "done": done, "terminated": done & (torch.rand(B, T, 1, generator=g) < 0.5),
        }, batch_size=[B, T]),
    }, batch_size=[B, T])


def test_loss_gradient_is_the_actor_critic_gradient():
    """d loss / d theta equals the gradient of the textbook terms built from the slow loop."""
    torch.manual_seed(0)
    model = ActorCritic(4, 2)
    batch = random_batch()
    gamma, rho_bar, c_bar, vc, ec = 0.99, 1.0, 1.0, 0.5, 0.01
    out = impala_loss(model, batch, gamma, rho_bar, c_bar, vc, ec)
    grads = torch.autograd.grad(out["loss"], list(model.parameters()))

    logits, value = model(batch[keys.OBSERVATION])
    logp = torch.log_softmax(logits, -1)
    log_pi = logp.gather(-1, batch[keys.ACTION].unsqueeze(-1))[..., 0]
    with torch.no_grad():
        v_next = model.value(batch[keys.NEXT_OBSERVATION])[..., 0]
    B, T = batch.batch_size
    pg, vl, n = 0.0, 0.0, B * T
    for b in range(B):
        adv, vs = slow_vtrace(gamma, log_pi[b].tolist(), batch[keys.ACTION_LOG_PROB][b].tolist(),
                              value[b, :, 0].tolist(), v_next[b].tolist(), batch[keys.REWARD][b, :, 0].tolist(),
                              batch[keys.DONE][b, :, 0].tolist(), batch[keys.TERMINATED][b, :, 0].tolist(), rho_bar, c_bar)
        for t in range(T):
            pg = pg - adv[t] * log_pi[b, t] / n
            vl = vl + 0.5 * (vs[t] - value[b, t, 0]) ** 2 / n
    entropy = -(logp.exp() * logp).sum(-1).mean()
    expected = torch.autograd.grad(pg + vc * vl - ec * entropy, list(model.parameters()))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_on_policy_ratio_is_one():
    model = ActorCritic(4, 2)
    batch = random_batch()
    with torch.no_grad():
        logits, _ = model(batch[keys.OBSERVATION])
        batch[keys.ACTION_LOG_PROB] = torch.log_softmax(logits, -1).gather(-1, batch[keys.ACTION].unsqueeze(-1))[..., 0]
    out = impala_loss(model, batch, 0.99, 1.0, 1.0, 0.5, 0.01)
    assert out["rho_mean"].item() == pytest.approx(1.0, abs=1e-5)
    assert set(out.keys()) == {"loss", "loss_policy", "loss_value", "entropy", "rho_mean", "advantage_std",
                               "value_mean", "logit_range"}


def test_normalized_advantage_loss():
    """With normalisation the policy term uses (A - mean A) / std A over the batch."""
    torch.manual_seed(1)
    model = ActorCritic(4, 2)
    batch = random_batch(seed=3)
    out = impala_loss(model, batch, 0.99, 1.0, 1.0, 0.5, 0.0, normalize_advantage=True)
    logits, value = model(batch[keys.OBSERVATION])
    log_pi = torch.log_softmax(logits, -1).gather(-1, batch[keys.ACTION].unsqueeze(-1))
    with torch.no_grad():
        adv, _ = vtrace_targets(0.99, log_pi, batch[keys.ACTION_LOG_PROB].unsqueeze(-1), value,
                                model.value(batch[keys.NEXT_OBSERVATION]), batch[keys.REWARD], batch[keys.DONE],
                                batch[keys.TERMINATED])
        adv = (adv - adv.mean()) / adv.std()
    torch.testing.assert_close(out["loss_policy"], -(adv * log_pi).mean().detach(), atol=1e-5, rtol=1e-5)
