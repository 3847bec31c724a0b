"""The IMPALA actor-critic loss on V-trace targets (:func:`distrl.algorithms.estimators.vtrace_targets`).

TorchRL's ``A2CLoss`` + ``VTrace`` estimator would need the actor and critic as
``TensorDictModule``s and re-run the actor inside the estimator; the loss is three lines, so it is
written here as a pure function of tensors (``tests/test_impala_math.py`` checks it, and V-trace
against TorchRL's and a slow loop in the paper's notation).
"""

from __future__ import annotations

import torch
from torch import nn
from tensordict import TensorDict

from distrl.algorithms.estimators import next_values, vtrace_targets
from distrl.data import keys
from distrl.nn.heads import CategoricalHead


def impala_loss(model: torch.nn.Module, batch: TensorDict, hp) -> TensorDict:
    """Actor-critic loss of a ``[B, T]`` trajectory batch under the current ``model``.

    ``hp`` provides ``gamma, rho_bar, c_bar, value_coef, entropy_coef, normalize_advantage,
    reward_scale`` (:class:`distrl.recipes.impala.recipe.ImpalaConfig`, or SEED's config): every
    loss of a model takes ``(model, batch, hp)``.

    ``batch`` holds :data:`distrl.data.keys.IMPALA_IN_KEYS`: ``observation [B, T, F]``,
    ``action [B, T]`` (int64; ``[B, T, A]`` float32 under a Gaussian head: the model's ``head``,
    :mod:`distrl.nn.heads`, reads the policy's output), ``action_log_prob [B, T]`` (behaviour policy), ``("next",
    ...)`` entries
    ``observation [B, T, F]`` and ``reward``/``done``/``terminated`` ``[B, T, 1]``.

    ``reward_scale`` multiplies the rewards before V-trace, so values and advantages are in scaled
    units: the critic's output has to travel ``scale / (1 - gamma)`` instead of ``1 / (1 - gamma)``
    (CartPole: 100), which Adam's bounded steps cover that much sooner.

    ``normalize_advantage`` rescales the V-trace advantages of the batch to zero mean and unit
    variance: the policy step then no longer grows with the return scale (CartPole's values
    reach ~100), which keeps long runs from collapsing onto one action.

    Returns a TensorDict of scalars: ``loss`` (to minimise), ``loss_policy``, ``loss_value``,
    ``entropy``, ``rho_mean`` (mean importance ratio pi/mu, a lag diagnostic), and the stability
    diagnostics ``advantage_std`` (before any normalisation), ``value_mean``, ``logit_range``
    (mean gap between the largest and smallest logit: a policy going deterministic shows it growing;
    a Gaussian's mean standard deviation: :meth:`distrl.nn.heads.GaussianHead.spread`).
    """
    out, value = model(batch[keys.OBSERVATION])  # [B, T, A] logits (or [B, T, 2A] Gaussian), [B, T, 1]
    with torch.no_grad():
        next_value = _next_value(model, batch, value)
    head = getattr(model, "head", None) or CategoricalHead(out.shape[-1])
    log_pi, entropy = head.log_prob_entropy(out, batch[keys.ACTION])  # [B, T] each
    log_pi = log_pi.unsqueeze(-1)  # [B, T, 1]
    log_mu = batch[keys.ACTION_LOG_PROB].unsqueeze(-1)
    with torch.no_grad():
        advantage, vs = vtrace_targets(
            hp.gamma,
            log_pi.detach(),
            log_mu,
            value.detach(),
            next_value,
            batch[keys.REWARD] * hp.reward_scale,
            batch[keys.DONE],
            batch[keys.TERMINATED],
            hp.rho_bar,
            hp.c_bar,
        )
    advantage_std = advantage.std()
    if hp.normalize_advantage:
        advantage = (advantage - advantage.mean()) / (advantage_std + 1e-8)
    loss_policy = -(advantage * log_pi).mean()
    loss_value = 0.5 * (vs - value).pow(2).mean()
    entropy = entropy.mean()
    loss = loss_policy + hp.value_coef * loss_value - hp.entropy_coef * entropy
    return TensorDict(
        loss=loss,
        loss_policy=loss_policy.detach(),
        loss_value=loss_value.detach(),
        entropy=entropy.detach(),
        rho_mean=(log_pi.detach() - log_mu).exp().mean(),
        advantage_std=advantage_std,
        value_mean=value.detach().mean(),
        logit_range=head.spread(out.detach()),
    )


def _next_value(model, batch: TensorDict, value: torch.Tensor) -> torch.Tensor:
    """``V(x_{s+1}) [B, T, 1]``: :func:`next_values` with the batch's layout checked (a user's sampler
    may not hand whole unrolls), or every next observation evaluated where the shortcut cannot hold:
    a recurrent core's ``value`` replays its states over the whole unroll (``UnrolledCore``)."""
    if not isinstance(model, nn.Module) or getattr(model, "recurrent", False):
        return model.value(batch[keys.NEXT_OBSERVATION])
    return next_values(model.value, value, batch[keys.NEXT_OBSERVATION], batch[keys.DONE], obs=batch[keys.OBSERVATION])
