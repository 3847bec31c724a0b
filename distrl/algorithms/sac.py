"""SAC's losses (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and Applications") as pure
functions, and the Polyak target update, for Ape-X's continuous-action learner.

Notation of the paper, with Ape-X's n-step returns (:func:`distrl.algorithms.estimators.nstep_returns`):
a transition carries ``G = sum_{k<m} gamma^k r_{t+k}`` and ``d = gamma^m`` (0 after a termination),

    y       = G + d (min_i Q'_i(s', a') - alpha log pi(a'|s')),   a' ~ pi(.|s')       (eq. 3, 8)
    J_Q     = sum_i E[w 1/2 (Q_i(s, a) - y)^2]                                          (eq. 5)
    J_pi    = E[alpha log pi(a~|s) - min_i Q_i(s, a~)],            a~ ~ pi(.|s)        (eq. 7, 12)
    J_alpha = E[-log alpha (log pi(a~|s) + H_target)],             H_target = -|A|     (eq. 18)

``Q'`` the Polyak-averaged target critics (:func:`polyak_update`), ``w`` the prioritized replay's
importance weights (1 under uniform sampling; they correct the bias of the TD regression, so they
weight ``J_Q`` only, as Ape-X DPG weights its critic). ``J_alpha`` is written in ``log alpha``, as
SB3, CleanRL and TorchRL optimise it: the paper's ``E[-alpha (log pi + H_target)]`` has the same
sign of gradient and a step size that does not vanish as ``alpha`` shrinks.

Why not TorchRL's ``SACLoss`` (``torchrl/objectives/sac.py``): its target is a TD(0) value estimator
with one scalar ``gamma``, where an n-step transition's bootstrap factor is ``gamma^m`` per item (shorter
windows at episode ends); and each call dispatches through TensorDict modules and ``vmap`` over the
stacked critics, overhead the learner pays per update at one update per env step on 2 CPU cores:
1.57x the CPU time of these functions per update (``experiments/bench_sac_loss.py``, docs/apex.md).
``tests/test_apex_sac_math.py`` checks these functions, and their gradients, against a slow loop in
the paper's notation, and with 1-step returns against ``SACLoss`` itself (the same three losses from
the same draws).
Why not TorchRL's ``SoftUpdate``: it updates the target parameters a ``LossModule`` owns; here the
target is a plain module, and the update is one fused ``lerp``.
"""

from __future__ import annotations

from typing import Iterable

import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.nn.sac import SACNetwork


def soft_targets(
    nstep_return: torch.Tensor,
    discount: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
) -> torch.Tensor:
    """``y = G + d (min_i Q'_i(s', a') - alpha log pi(a'|s'))``.

    Args:
        nstep_return, discount: ``[B]``; next_q: ``[2, B]`` the target critics at ``(s', a')``;
        next_log_prob: ``[B]`` of ``a'``; alpha: the temperature (a constant here).
    Returns:
        ``y [B]``.
    """
    return nstep_return + discount * (next_q.min(0).values - alpha * next_log_prob)


def critic_loss(q: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(J_Q [], td [B])``: ``sum_i mean(w 1/2 (Q_i - y)^2)`` over ``q [2, B]``, ``y [B]`` (no gradient),
    ``weight [B]``; ``td`` the larger of the two ``|Q_i - y|`` (detached: the new priorities)."""
    err = q - y.detach()
    loss = (weight * 0.5 * err.square()).mean(-1).sum()
    return loss, err.detach().abs().max(0).values


def actor_loss(log_prob: torch.Tensor, q_pi: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """``J_pi = mean(alpha log pi(a~|s) - min_i Q_i(s, a~))`` of ``log_prob [B]``, ``q_pi [2, B]``."""
    return (alpha * log_prob - q_pi.min(0).values).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``J_alpha = mean(-log_alpha (log pi(a~|s) + H_target))``; ``log_prob [B]`` is a constant here."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


@torch.no_grad()
def polyak_update(target: Iterable[torch.Tensor], online: Iterable[torch.Tensor], tau: float) -> None:
    """``theta' <- tau theta + (1 - tau) theta'`` for each pair of tensors, in place."""
    torch._foreach_lerp_(list(target), list(online), tau)


def sac_loss(model: SACNetwork, target_q: torch.nn.Module, batch: TensorDict, target_entropy: float) -> TensorDict:
    """The three losses on a sampled ``[B]`` batch, all from the parameters before the step, summed
    into ``loss`` for one backward and one Adam step (TorchRL's ``SACLoss`` does the same; SB3 steps
    the critic before it evaluates the actor's loss).

    ``batch`` holds ``observation [B, F]``, ``action [B, A]``, ``nstep_return [B]``,
    ``bootstrap_discount [B]``, ``next_observation [B, F]`` and ``priority_weight [B]``.
    ``target_q`` maps ``(z, a) -> [2, B]`` (a copy of ``model.qvalue``). The actor's loss reads the
    critics with their gradients off, so its gradient reaches the policy only (TorchRL detaches the
    critic's parameters there too); the critics' loss reaches the critics only.

    Returns ``loss`` (with its graph), ``loss_qvalue``, ``loss_actor``, ``loss_alpha``, ``alpha``,
    ``entropy`` (``-mean log pi``), ``q_mean`` and ``td_error [B]`` (detached).
    """
    alpha = model.alpha
    z = model.features(batch[keys.OBSERVATION])
    with torch.no_grad():
        z_next = model.features(batch[keys.NEXT_OBSERVATION])
        next_action, next_log_prob = model.sample(z_next)
        y = soft_targets(
            batch[keys.NSTEP_RETURN],
            batch[keys.BOOTSTRAP_DISCOUNT],
            target_q(z_next, next_action),
            next_log_prob,
            alpha,
        )
    q = model.qvalue(z, batch[keys.ACTION])
    loss_q, td = critic_loss(q, y, batch[keys.PRIORITY_WEIGHT])
    action, log_prob = model.sample(z)
    model.qvalue.requires_grad_(False)
    try:
        loss_pi = actor_loss(log_prob, model.qvalue(z, action), alpha)
    finally:
        model.qvalue.requires_grad_(True)
    loss_alpha = temperature_loss(model.log_alpha, log_prob, target_entropy)
    return TensorDict(
        {
            keys.LOSS: loss_q + loss_pi + loss_alpha,
            "loss_qvalue": loss_q.detach(),
            "loss_actor": loss_pi.detach(),
            "loss_alpha": loss_alpha.detach(),
            "alpha": alpha,
            "entropy": -log_prob.detach().mean(),
            keys.Q_MEAN: q.detach().mean(),
            keys.TD_ERROR: td,
        },
        batch_size=[],
    )
