"""Ape-X's loss (Horgan et al., 2018) as pure functions: double-DQN targets (van Hasselt et al.,
2016), the importance-weighted Huber loss, and the epsilon ladder of the actors.

Notation of the papers: a transition ``t`` of an n-step window has the return
``G_t = sum_{k=0}^{m-1} gamma^k r_{t+k}`` where ``m = min(n, steps to the episode's end)``
(:func:`distrl.algorithms.estimators.nstep_returns`, computed by the actors); the target is
``y_t = G_t + gamma^m (1 - terminated_{t+m-1}) Q_target(s_{t+m}, argmax_a Q(s_{t+m}, a))``.
A truncated episode (a time limit) still bootstraps from its true final observation ``s_{t+m}``;
only a termination stops it. The prioritized-replay weights the batch carries (Schaul et al., 2016)
are the replay's: :mod:`distrl.replay.weights`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from distrl.data import keys


def epsilon_ladder(num_actors: int, eps: float = 0.4, alpha: float = 7.0) -> list[float]:
    """Exploration rate of each actor, ``eps_i = eps^(1 + alpha i / (N - 1))`` (Ape-X, section 4.1)."""
    if num_actors == 1:
        return [eps]
    return [eps ** (1 + alpha * i / (num_actors - 1)) for i in range(num_actors)]


# ---- double DQN ---------------------------------------------------------------------------------------
def double_q_targets(
    nstep_return: torch.Tensor, discount: torch.Tensor, next_q_online: torch.Tensor, next_q_target: torch.Tensor
) -> torch.Tensor:
    """``y = G + discount * Q_target(s', argmax_a Q_online(s', a))``.

    Args:
        nstep_return, discount: ``[B]``; next_q_online, next_q_target: ``[B, A]`` at the bootstrap state.
    Returns:
        ``y [B]``.
    """
    best = next_q_online.argmax(-1, keepdim=True)
    return nstep_return + discount * next_q_target.gather(-1, best).squeeze(-1)


def weighted_huber_loss(
    q_taken: torch.Tensor, target: torch.Tensor, weight: torch.Tensor, delta: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
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
        y = double_q_targets(
            batch[keys.NSTEP_RETURN], batch[keys.BOOTSTRAP_DISCOUNT], model(next_obs), target(next_obs)
        )
    loss, td = weighted_huber_loss(q_taken, y, batch[keys.PRIORITY_WEIGHT], hp.huber_delta)
    return TensorDict({keys.LOSS: loss, keys.TD_ERROR: td, keys.Q_MEAN: q_taken.detach().mean()}, batch_size=[])
