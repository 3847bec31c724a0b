"""Ape-X's targets against slow loops in the papers' notation.

Horgan et al. (2018), eq. (1), with n-step returns cut at episode ends:
    G_t = sum_{k=0}^{m-1} gamma^k r_{t+k},   m = min(n, steps until the episode ends)
    y_t = G_t + gamma^m (1 - terminated_{t+m-1}) Q_target(s_{t+m}, argmax_a Q(s_{t+m}, a))
A truncation (time limit) ends the episode but still bootstraps from its final observation.
"""

from __future__ import annotations

import pytest
import torch

from distrl.algorithms.apex import double_q_targets, epsilon_ladder, weighted_huber_loss
from distrl.algorithms.estimators import nstep_returns
from distrl.replay.weights import importance_weights


def slow_nstep(r, term, trunc, gamma, n):
    """One env's ``[T]`` lists -> per start t: (G_t, bootstrap factor, index of the bootstrap step)."""
    out = []
    for t in range(len(r) - n + 1):
        G, m = 0.0, 0
        for k in range(n):
            G += gamma**k * r[t + k]
            m = k + 1
            if term[t + k] or trunc[t + k]:
                break
        discount = 0.0 if term[t + m - 1] else gamma**m
        out.append((G, discount, t + m - 1))
    return out


@pytest.mark.parametrize("n", [1, 3, 5])
def test_nstep_returns_match_the_loop_across_episode_ends(n):
    g = torch.Generator().manual_seed(n)
    B, T, gamma = 6, 17, 0.9
    reward = torch.randn(B, T, generator=g, dtype=torch.float64)
    ends = torch.rand(B, T, generator=g)
    terminated, truncated = ends < 0.12, (ends > 0.12) & (ends < 0.22)
    terminated[0, 2], truncated[0, 3] = True, True  # back-to-back ends, both kinds
    G, discount, last = nstep_returns(reward, terminated, truncated, gamma, n)
    assert G.shape == discount.shape == last.shape == (B, T - n + 1)
    for b in range(B):
        expect = slow_nstep(reward[b].tolist(), terminated[b].tolist(), truncated[b].tolist(), gamma, n)
        torch.testing.assert_close(G[b], torch.tensor([e[0] for e in expect], dtype=torch.float64))
        torch.testing.assert_close(discount[b], torch.tensor([e[1] for e in expect], dtype=torch.float64))
        assert last[b].tolist() == [e[2] for e in expect]
    cut = (truncated & ~terminated).gather(1, last)  # windows that a truncation ended
    assert cut.any() and (discount[cut] > 0).all()  # a truncation bootstraps


def test_double_q_target_matches_the_loop():
    g = torch.Generator().manual_seed(0)
    B, A = 20, 4
    G, disc = torch.randn(B, generator=g), torch.rand(B, generator=g)
    disc[::3] = 0.0  # terminations
    q_online, q_target = torch.randn(B, A, generator=g), torch.randn(B, A, generator=g)
    y = double_q_targets(G, disc, q_online, q_target)
    for i in range(B):
        a_star = max(range(A), key=lambda a: q_online[i, a].item())  # chosen by the online net...
        expect = G[i].item() + disc[i].item() * q_target[i, a_star].item()  # ...valued by the target net
        assert y[i].item() == pytest.approx(expect, rel=1e-6, abs=1e-6)


def test_weighted_huber_loss_and_td_errors():
    q = torch.tensor([0.0, 0.0, 1.0], requires_grad=True)
    y, w = torch.tensor([0.5, 3.0, 1.0]), torch.tensor([1.0, 0.5, 2.0])
    loss, td = weighted_huber_loss(q, y, w)
    # Huber(0.5) = 0.125, Huber(3) = 3 - 0.5 = 2.5, Huber(0) = 0; weighted mean over 3
    assert loss.item() == pytest.approx((0.125 + 0.5 * 2.5 + 0.0) / 3)
    assert td.tolist() == [0.5, 3.0, 0.0] and not td.requires_grad
    loss.backward()
    assert q.grad.tolist() == pytest.approx([-0.5 / 3, -0.5 / 3, 0.0])  # the big error's gradient is clipped


def test_importance_weights_and_epsilon_ladder():
    P = torch.tensor([0.1, 0.2, 0.7])
    w = importance_weights(P, 3, P.min(), beta=0.5)
    slow = [(3 * p) ** -0.5 for p in P.tolist()]
    assert w.tolist() == pytest.approx([x / max(slow) for x in slow])
    ladder = epsilon_ladder(8)
    assert ladder[0] == pytest.approx(0.4) and ladder[-1] == pytest.approx(0.4**8)
    assert all(a > b for a, b in zip(ladder, ladder[1:])) and epsilon_ladder(1) == [0.4]
