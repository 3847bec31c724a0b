"""Ape-X's math (Horgan et al., 2018) as pure functions: prioritized-replay probabilities and
importance weights (Schaul et al., 2016), n-step returns built across episode ends, double-DQN
targets (van Hasselt et al., 2016), the epsilon ladder of the actors, and the learner's loss.

Notation of the papers: a transition ``t`` of an n-step window has the return
``G_t = sum_{k=0}^{m-1} gamma^k r_{t+k}`` where ``m = min(n, steps to the episode's end)``; the
target is ``y_t = G_t + gamma^m (1 - terminated_{t+m-1}) Q_target(s_{t+m}, argmax_a Q(s_{t+m}, a))``.
A truncated episode (a time limit) still bootstraps from its true final observation ``s_{t+m}``;
only a termination stops it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from distrl.data import keys


# ---- prioritized replay ------------------------------------------------------------------------
def priority_weights(priority: torch.Tensor, alpha: float, eps: float) -> torch.Tensor:
    """Sampling weights ``(|delta| + eps)^alpha`` of raw priorities ``|delta|`` (any shape)."""
    return (priority.abs() + eps).pow(alpha)


def importance_weights(prob: torch.Tensor, size: int, min_prob: torch.Tensor | float, beta: float) -> torch.Tensor:
    """``w_i = (N P(i))^-beta / max_j (N P(j))^-beta = (P(i) / min_j P(j))^-beta``.

    Only the ratio ``P(i) / min_j P(j)`` enters, so unnormalised weights ``p_i^alpha`` and their
    minimum give the same result (the sampler passes those: two ops fewer per batch).

    Args:
        prob: ``[B]`` sampling probabilities ``P(i)`` of the sampled items.
        size: ``N``, the items in the buffer (every shard together).
        min_prob: the smallest ``P(j)`` over the buffer: the normaliser makes the largest possible
            weight 1, so weights only ever scale updates down (Schaul et al., section 3.4).
    """
    del size  # cancels between w_i and the normaliser; kept in the signature to mirror the formula
    return (prob / min_prob).pow(-beta)


def annealed_beta(beta0: float, step: int, steps: int) -> float:
    """``beta`` grown linearly from ``beta0`` at step 0 to 1 at ``steps`` and held there."""
    if steps <= 0:
        return 1.0
    return beta0 + (1.0 - beta0) * min(1.0, step / steps)


def epsilon_ladder(num_actors: int, eps: float = 0.4, alpha: float = 7.0) -> list[float]:
    """Exploration rate of each actor, ``eps_i = eps^(1 + alpha i / (N - 1))`` (Ape-X, section 4.1)."""
    if num_actors == 1:
        return [eps]
    return [eps ** (1 + alpha * i / (num_actors - 1)) for i in range(num_actors)]


# ---- n-step returns -------------------------------------------------------------------------------
def nstep_returns(reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, gamma: float,
                  n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n-step returns of every start ``t`` whose window fits in the ``T`` steps given.

    Args:
        reward, terminated, truncated: ``[B, T]`` per-step outcomes of ``B`` envs (bools for the ends).
        gamma: discount; n: steps per return (``1 <= n <= T``).

    Returns:
        ``(G [B, T'], discount [B, T'], last [B, T'])`` with ``T' = T - n + 1``: the return
        ``G_t``, the bootstrap factor ``gamma^m (1 - terminated_{t+m-1})`` and the step
        ``t + m - 1`` whose next observation ``s_{t+m}`` the target bootstraps from (int64).
    """
    B, T = reward.shape
    if not 1 <= n <= T:
        raise ValueError(f"n={n} must be in [1, T={T}]")
    Tp = T - n + 1
    ret = torch.zeros(B, Tp, dtype=reward.dtype, device=reward.device)
    scale = torch.ones_like(ret)  # gamma^k, frozen at gamma^m once the episode has ended
    last = torch.arange(Tp, device=reward.device).expand(B, Tp).clone()
    ended = torch.zeros(B, Tp, dtype=torch.bool, device=reward.device)
    term_at_end = torch.zeros_like(ended)
    for k in range(n):
        running = ~ended
        ret += torch.where(running, scale * reward[:, k:k + Tp], 0.0)
        last = torch.where(running, torch.arange(k, k + Tp, device=reward.device).expand(B, Tp), last)
        term_at_end = torch.where(running, terminated[:, k:k + Tp], term_at_end)
        ended = ended | terminated[:, k:k + Tp] | truncated[:, k:k + Tp]
        scale = torch.where(running, scale * gamma, scale)
    discount = scale * (~term_at_end).to(reward.dtype)
    return ret, discount, last


# ---- double DQN ---------------------------------------------------------------------------------------
def double_q_targets(nstep_return: torch.Tensor, discount: torch.Tensor, next_q_online: torch.Tensor,
                     next_q_target: torch.Tensor) -> torch.Tensor:
    """``y = G + discount * Q_target(s', argmax_a Q_online(s', a))``.

    Args:
        nstep_return, discount: ``[B]``; next_q_online, next_q_target: ``[B, A]`` at the bootstrap state.
    Returns:
        ``y [B]``.
    """
    best = next_q_online.argmax(-1, keepdim=True)
    return nstep_return + discount * next_q_target.gather(-1, best).squeeze(-1)


def weighted_huber_loss(q_taken: torch.Tensor, target: torch.Tensor, weight: torch.Tensor,
                        delta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance-weighted Huber loss and the TD errors the new priorities come from.

    Args:
        q_taken: ``[B]`` ``Q(s, a)`` of the stored actions; target: ``[B]`` (no gradient);
        weight: ``[B]`` importance weights.
    Returns:
        ``(loss [], td_error [B])`` with ``td_error = target - q_taken`` (detached).
    """
    td = target.detach() - q_taken
    per_item = F.huber_loss(q_taken, target.detach(), reduction="none", delta=delta)
    return (weight * per_item).mean(), td.detach()


def double_dqn_loss(model: torch.nn.Module, target: torch.nn.Module, batch: TensorDict, hp) -> TensorDict:
    """The learner's loss on a sampled ``[B]`` batch: double-DQN n-step targets, Huber, weighted.

    ``batch`` holds ``observation [B, *F]``, ``action [B]``, ``nstep_return [B]``,
    ``bootstrap_discount [B]`` (``gamma^m``, 0 after a termination), ``next_observation [B, *F]``
    and ``priority_weight [B]``; ``hp`` provides ``huber_delta``
    (:class:`distrl.recipes.apex.recipe.ApexConfig`). ``model`` and ``target`` map ``obs -> Q [B, A]``.

    Returns ``loss`` (with its graph), ``td_error [B]`` (detached: the new priorities) and ``q_mean``.
    """
    q_taken = model(batch[keys.OBSERVATION]).gather(-1, batch[keys.ACTION][:, None]).squeeze(-1)
    with torch.no_grad():
        next_obs = batch[keys.NEXT_OBSERVATION]
        y = double_q_targets(batch[keys.NSTEP_RETURN], batch[keys.BOOTSTRAP_DISCOUNT], model(next_obs), target(next_obs))
    loss, td = weighted_huber_loss(q_taken, y, batch[keys.PRIORITY_WEIGHT], hp.huber_delta)
    return TensorDict({keys.LOSS: loss, keys.TD_ERROR: td, keys.Q_MEAN: q_taken.detach().mean()}, batch_size=[])
