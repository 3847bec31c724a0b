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

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.a3c import a3c_loss
from distrl.algorithms.estimators import n_step_advantage
from distrl.data import keys
from distrl.nn.models import ActorCritic
from references import slow_n_step_returns


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
        R = torch.tensor(slow_n_step_returns(gamma, col(V_next), col(r), col(done), col(term)))
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
    return TensorDict(
        {
            keys.OBSERVATION: torch.randn(B, T, F, generator=g),
            keys.ACTION: torch.randint(A, (B, T), generator=g),
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


def sharpened_model(obs_dim: int, num_actions: int, seed: int) -> ActorCritic:
    """An ``ActorCritic`` whose policy head is not shrunk to near-uniform: at a uniform policy the
    entropy's gradient is 0, and a test could not see the entropy term."""
    torch.manual_seed(seed)
    model = ActorCritic(obs_dim, num_actions)
    with torch.no_grad():
        model.policy[-1].weight.mul_(100.0)
        model.policy[-1].bias.normal_()
    return model


@pytest.mark.parametrize("reward_scale", [1.0, 0.1])
def test_loss_gradient_is_algorithm_s3(reward_scale):
    """d loss / d theta = -(d theta + value_coef / 2 * d theta_v) / (B T), d theta and d theta_v
    accumulated step by step as in Algorithm S3 (with the entropy weight beta), on rewards
    multiplied by ``reward_scale``; the policy head is sharpened so the entropy term moves the
    gradient (at a near-uniform policy its gradient is ~0)."""
    model = sharpened_model(4, 3, seed=0)
    batch = random_batch()
    gamma, vc, beta = 0.95, 0.5, 0.01
    out = a3c_loss(
        model,
        batch,
        SimpleNamespace(
            gamma=gamma, value_coef=vc, entropy_coef=beta, normalize_advantage=False, reward_scale=reward_scale
        ),
    )
    grads = torch.autograd.grad(out["loss"], list(model.parameters()))

    B, T = batch.batch_size
    objective = 0.0  # sum of what Algorithm S3 ascends, minus the value regression it descends
    for b in range(B):
        logits, V = model(batch[keys.OBSERVATION][b])  # [T, A], [T, 1]
        with torch.no_grad():
            V_next = model.value(batch[keys.NEXT_OBSERVATION][b])[:, 0].tolist()
        r = (reward_scale * batch[keys.REWARD][b, :, 0]).tolist()
        R = slow_n_step_returns(
            gamma, V_next, r, batch[keys.DONE][b, :, 0].tolist(), batch[keys.TERMINATED][b, :, 0].tolist()
        )
        for i in range(T):
            log_pi = torch.log_softmax(logits[i], -1)
            H = -(log_pi.exp() * log_pi).sum()
            objective = objective + log_pi[batch[keys.ACTION][b, i]] * (R[i] - V[i, 0].detach()) + beta * H
            objective = objective - vc / 2 * (R[i] - V[i, 0]) ** 2
    expected = torch.autograd.grad(-objective / (B * T), list(model.parameters()))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)
    assert set(out.keys()) == {"loss", "loss_policy", "loss_value", "entropy", "advantage_mean"}


def slow_a3c_loss(model, batch, gamma, value_coef, beta, normalize, reward_scale):
    """The loss by Algorithm S3's per-step terms, averaged over the ``n = B T`` steps, from python
    loops over the paper's quantities (``model`` is a float64 copy: the reference's rounding is far
    below float32's). Returns ``(L, L_pi, L_v, H, mean A)`` as float64 tensors; ``L`` has its graph.

        A_i = R_i - V(s_i)                        held constant (no gradient through R_i or A_i)
        A_i <- (A_i - mean A) / (std A + 1e-8)    if normalize, std with Bessel's n - 1
        L_pi = -1/n sum_i A_i log pi(a_i|s_i)
        L_v  =  1/n sum_i (R_i - V(s_i))^2 / 2
        H    =  1/n sum_i -sum_a pi(a|s_i) log pi(a|s_i)
        L    =  L_pi + value_coef L_v - beta H
    """
    B, T = batch.batch_size
    log_pi, V, H, A, R_all = [], [], [], [], []
    for b in range(B):
        logits, values = model(batch[keys.OBSERVATION][b].double())  # [T, A], [T, 1]
        with torch.no_grad():
            V_next = model.value(batch[keys.NEXT_OBSERVATION][b].double())[:, 0].tolist()
        r = [reward_scale * x for x in batch[keys.REWARD][b, :, 0].tolist()]
        R = slow_n_step_returns(
            gamma, V_next, r, batch[keys.DONE][b, :, 0].tolist(), batch[keys.TERMINATED][b, :, 0].tolist()
        )
        for i in range(T):
            lp = torch.log_softmax(logits[i], -1)
            log_pi.append(lp[batch[keys.ACTION][b, i]])
            H.append(-(lp.exp() * lp).sum())
            V.append(values[i, 0])
            R_all.append(R[i])
            A.append(R[i] - values[i, 0].item())
    n = len(A)
    mean_A = sum(A) / n
    if normalize:
        std_A = math.sqrt(sum((a - mean_A) ** 2 for a in A) / (n - 1))
        A = [(a - mean_A) / (std_A + 1e-8) for a in A]
    L_pi = -sum(A[i] * log_pi[i] for i in range(n)) / n
    L_v = sum((R_all[i] - V[i]) ** 2 / 2 for i in range(n)) / n
    H_mean = sum(H) / n
    return L_pi + value_coef * L_v - beta * H_mean, L_pi, L_v, H_mean, torch.tensor(mean_A, dtype=torch.float64)


@pytest.mark.parametrize("normalize", [False, True])
def test_loss_and_its_reported_terms_match_algorithm_s3(normalize):
    """Every scalar ``a3c_loss`` returns (``loss``, ``loss_policy``, ``loss_value``, ``entropy``,
    ``advantage_mean``) and the gradient of ``loss`` against :func:`slow_a3c_loss` (the per-step
    loop, float64, autograd of the hand-written loss), with and without advantage normalisation,
    a non-unit ``reward_scale`` and an entropy weight large enough to move the gradient.

    Tolerances: float32 against float64 over 21 steps of a 64-unit MLP; the float32 rounding is
    ~1e-7 relative per op, a few hundred ops deep, so rtol 1e-5 with atol 1e-6 on O(1) values."""
    model = sharpened_model(4, 3, seed=1)
    batch = random_batch(seed=5)
    done, term = batch[keys.DONE], batch[keys.TERMINATED]
    assert term.any() and (done & ~term).any()  # both kinds of episode end restart a return
    gamma, vc, beta, scale = 0.95, 0.5, 0.1, 0.5
    out = a3c_loss(
        model,
        batch,
        SimpleNamespace(
            gamma=gamma, value_coef=vc, entropy_coef=beta, normalize_advantage=normalize, reward_scale=scale
        ),
    )
    grads = torch.autograd.grad(out["loss"], list(model.parameters()))

    model64 = copy.deepcopy(model).double()
    L, L_pi, L_v, H, mean_A = slow_a3c_loss(model64, batch, gamma, vc, beta, normalize, scale)
    expected = torch.autograd.grad(L, list(model64.parameters()))
    close = {"rtol": 1e-5, "atol": 1e-6}
    for name, want in (
        ("loss", L),
        ("loss_policy", L_pi),
        ("loss_value", L_v),
        ("entropy", H),
        ("advantage_mean", mean_A),
    ):
        torch.testing.assert_close(out[name].double(), want.detach(), **close, msg=lambda m, name=name: f"{name}: {m}")
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got.double(), want, **close)
