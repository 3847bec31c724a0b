"""V-trace and the IMPALA loss against slow loops written in the paper's notation.

Espeholt et al. (2018), eq. (1): for one trajectory x_s..x_{s+n},
    v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V
    delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
with rho_t = min(rho_bar, pi/mu), c_i = min(c_bar, pi/mu). An episode end at t cuts the sum
after t; a termination also drops gamma V(x_{t+1}). The policy gradient uses
    A_s = rho_s (r_s + gamma v_{s+1} - V(x_s)), with v_{s+1} := V(x_{s+1}) at an episode end.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.estimators import vtrace_targets
from distrl.algorithms.impala import impala_loss
from distrl.data import keys
from distrl.nn.models import ActorCritic
from references import slow_vtrace_targets


def slow_vtrace(gamma, log_pi, log_mu, V, V_next, r, done, term, rho_bar, c_bar):
    """Per-trajectory python loops; tensors are [T] for one env: the advantages
    ``rho_s (r_s + gamma v_{s+1} - V(x_s))`` and the targets ``v_s`` (eq. 1)."""
    T = len(r)
    ratio = [math.exp(log_pi[t] - log_mu[t]) for t in range(T)]
    rho = [min(rho_bar, x) for x in ratio]
    v = slow_vtrace_targets(gamma, ratio, V, V_next, r, done, term, rho_bar, c_bar)
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
        slow_adv, slow_v = slow_vtrace(
            gamma, col(log_pi), col(log_mu), col(V), col(V_next), col(r), col(done), col(term), rho_bar, c_bar
        )
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
    want = vtrace_advantage_estimate(
        gamma, log_pi, log_mu, V, V_next, r, done, term, rho_thresh=rho_bar, c_thresh=c_bar, time_dim=-2
    )
    for a, b in zip(got, want):  # float32 sums of up to 32 terms of size ~10 in different orders
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def random_batch(B=3, T=7, F=4, A=2, seed=0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(B, T, 1, generator=g) < 0.2
    return TensorDict(
        {
            keys.OBSERVATION: torch.randn(B, T, F, generator=g),
            keys.ACTION: torch.randint(A, (B, T), generator=g),
            keys.ACTION_LOG_PROB: -torch.rand(B, T, generator=g) - 0.3,
            keys.POLICY_VERSION: torch.zeros(B, T, dtype=torch.int64),
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: torch.randn(B, T, F, generator=g),
                    "reward": torch.randn(B, T, 1, generator=g),
                    "done": done,
                    "terminated": done & (torch.rand(B, T, 1, generator=g) < 0.5),
                },
                batch_size=[B, T],
            ),
        },
        batch_size=[B, T],
    )


def test_loss_gradient_is_the_actor_critic_gradient():
    """d loss / d theta equals the gradient of the textbook terms built from the slow loop."""
    torch.manual_seed(0)
    model = ActorCritic(4, 2)
    batch = random_batch()
    gamma, rho_bar, c_bar, vc, ec = 0.99, 1.0, 1.0, 0.5, 0.01
    out = impala_loss(
        model,
        batch,
        SimpleNamespace(
            gamma=gamma,
            rho_bar=rho_bar,
            c_bar=c_bar,
            value_coef=vc,
            entropy_coef=ec,
            normalize_advantage=False,
            reward_scale=1.0,
        ),
    )
    grads = torch.autograd.grad(out["loss"], list(model.parameters()))

    logits, value = model(batch[keys.OBSERVATION])
    logp = torch.log_softmax(logits, -1)
    log_pi = logp.gather(-1, batch[keys.ACTION].unsqueeze(-1))[..., 0]
    with torch.no_grad():
        v_next = model.value(batch[keys.NEXT_OBSERVATION])[..., 0]
    B, T = batch.batch_size
    pg, vl, n = 0.0, 0.0, B * T
    for b in range(B):
        adv, vs = slow_vtrace(
            gamma,
            log_pi[b].tolist(),
            batch[keys.ACTION_LOG_PROB][b].tolist(),
            value[b, :, 0].tolist(),
            v_next[b].tolist(),
            batch[keys.REWARD][b, :, 0].tolist(),
            batch[keys.DONE][b, :, 0].tolist(),
            batch[keys.TERMINATED][b, :, 0].tolist(),
            rho_bar,
            c_bar,
        )
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
    out = impala_loss(
        model,
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
    assert out["rho_mean"].item() == pytest.approx(1.0, abs=1e-5)
    assert set(out.keys()) == {
        "loss",
        "loss_policy",
        "loss_value",
        "entropy",
        "rho_mean",
        "advantage_std",
        "value_mean",
        "logit_range",
    }


def sharpened_model(obs_dim: int, num_actions: int, seed: int) -> ActorCritic:
    """An ``ActorCritic`` with its policy head not shrunk to near-uniform, so that the ratios
    pi/mu spread on both sides of the clipping thresholds and the entropy has a gradient."""
    torch.manual_seed(seed)
    model = ActorCritic(obs_dim, num_actions)
    with torch.no_grad():
        model.policy[-1].weight.mul_(100.0)
        model.policy[-1].bias.normal_()
    return model


def _f64(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def slow_impala_loss(model, batch, gamma, rho_bar, c_bar, value_coef, entropy_coef, normalize, reward_scale):
    """IMPALA's loss from :func:`slow_vtrace` and per-step python sums, in float64 (``model`` is a
    float64 copy). Returns a dict of float64 scalars named as ``impala_loss``'s; ``loss`` has its graph.

        A_s, v_s       from slow_vtrace on rewards reward_scale * r_s, both held constant
        A_s <- (A_s - mean A) / (std A + 1e-8)    if normalize, std with Bessel's n - 1
        loss = -1/n sum A_s log pi(a_s|x_s) + value_coef/n sum (v_s - V(x_s))^2 / 2 - entropy_coef/n sum H_s
    """
    B, T = batch.batch_size
    log_pi, V, H, A, vs, ratio, gaps = [], [], [], [], [], [], []
    for b in range(B):
        logits, values = model(batch[keys.OBSERVATION][b].double())  # [T, A], [T, 1]
        with torch.no_grad():
            V_next = model.value(batch[keys.NEXT_OBSERVATION][b].double())[:, 0].tolist()
        lp = torch.log_softmax(logits, -1)
        lp_a = [lp[t, batch[keys.ACTION][b, t]] for t in range(T)]
        log_mu = batch[keys.ACTION_LOG_PROB][b].double().tolist()
        adv, v = slow_vtrace(
            gamma,
            [x.item() for x in lp_a],
            log_mu,
            values[:, 0].tolist(),
            V_next,
            [reward_scale * x for x in batch[keys.REWARD][b, :, 0].tolist()],
            batch[keys.DONE][b, :, 0].tolist(),
            batch[keys.TERMINATED][b, :, 0].tolist(),
            rho_bar,
            c_bar,
        )
        for t in range(T):
            log_pi.append(lp_a[t])
            H.append(-(lp[t].exp() * lp[t]).sum())
            V.append(values[t, 0])
            ratio.append(math.exp(lp_a[t].item() - log_mu[t]))
            gaps.append(max(logits[t].tolist()) - min(logits[t].tolist()))
        A += adv
        vs += v
    n = len(A)
    mean_A = sum(A) / n
    std_A = math.sqrt(sum((a - mean_A) ** 2 for a in A) / (n - 1))
    if normalize:
        A = [(a - mean_A) / (std_A + 1e-8) for a in A]
    L_pi = -sum(A[s] * log_pi[s] for s in range(n)) / n
    L_v = sum((vs[s] - V[s]) ** 2 / 2 for s in range(n)) / n
    H_mean = sum(H) / n
    return {
        "loss": L_pi + value_coef * L_v - entropy_coef * H_mean,
        "loss_policy": L_pi,
        "loss_value": L_v,
        "entropy": H_mean,
        "rho_mean": _f64(sum(ratio) / n),
        "advantage_std": _f64(std_A),
        "value_mean": _f64(sum(x.item() for x in V) / n),
        "logit_range": _f64(sum(gaps) / n),
    }


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("rho_bar,c_bar", [(1.2, 0.9), (0.9, 1.2)])
def test_loss_and_its_reported_terms_match_the_slow_loop(rho_bar, c_bar, normalize):
    """Every scalar ``impala_loss`` returns and the gradient of ``loss`` against
    :func:`slow_impala_loss` (V-trace by eq. (1)'s loops, float64, autograd of the hand-written
    loss), off-policy with ratios pi/mu spread over [0.2, 5] so that ``rho_bar`` and ``c_bar``
    both clip (and differ: swapping them changes the result), episode ends of both kinds,
    ``reward_scale`` 0.5, with and without advantage normalisation.

    Tolerances: float32 against float64; a few hundred float32 ops deep, rtol 1e-5 and atol 1e-6
    on O(1) values leave room for a different reduction order."""
    model = sharpened_model(4, 2, seed=1)
    batch = random_batch(seed=3)
    done, term = batch[keys.DONE], batch[keys.TERMINATED]
    assert term.any() and (done & ~term).any()  # both kinds of episode end cut a trace
    with torch.no_grad():  # behaviour log-probs log mu = log pi + noise: ratios on both sides of 1
        logits, _ = model(batch[keys.OBSERVATION])
        log_pi = torch.log_softmax(logits, -1).gather(-1, batch[keys.ACTION].unsqueeze(-1))[..., 0]
        g = torch.Generator().manual_seed(4)
        batch[keys.ACTION_LOG_PROB] = log_pi + (torch.rand(log_pi.shape, generator=g) * 3.2 - 1.6)
    gamma, vc, ec, scale = 0.97, 0.5, 0.1, 0.5
    out = impala_loss(
        model,
        batch,
        SimpleNamespace(
            gamma=gamma,
            rho_bar=rho_bar,
            c_bar=c_bar,
            value_coef=vc,
            entropy_coef=ec,
            normalize_advantage=normalize,
            reward_scale=scale,
        ),
    )
    grads = torch.autograd.grad(out["loss"], list(model.parameters()))

    model64 = copy.deepcopy(model).double()
    want = slow_impala_loss(model64, batch, gamma, rho_bar, c_bar, vc, ec, normalize, scale)
    expected = torch.autograd.grad(want["loss"], list(model64.parameters()))
    assert set(out.keys()) == set(want)
    for name, w in want.items():
        torch.testing.assert_close(
            out[name].double(), w.detach(), rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}"
        )
    for got, w in zip(grads, expected):
        torch.testing.assert_close(got.double(), w, rtol=1e-5, atol=1e-6)
