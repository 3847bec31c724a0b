"""The IMPALA actor-critic loss on V-trace targets.

V-trace is written here rather than taken from TorchRL's ``vtrace_advantage_estimate``, for
speed alone: the two agree to 1e-6 (``tests/test_impala_math.py`` checks both against a slow loop
in the paper's notation), but TorchRL's reverse scan makes six small ops a step and this one one,
and on these CPUs a small torch op costs several us whatever its size: on sf's ``[64, 32]`` batch
0.29 ms against 0.13 ms, of a 4.2 ms update (``python experiments/bench_learner.py``, 2026-12-02).
TorchRL's ``A2CLoss`` + ``VTrace`` estimator would need the actor and critic as
``TensorDictModule``s and re-run the actor inside the estimator; the loss is three lines, so it is
written here as a pure function of tensors.
"""
from __future__ import annotations

import torch
from torch import nn
from tensordict import TensorDict

from distrl.data import keys
from distrl.nn.heads import CategoricalHead


def vtrace_targets(
    gamma: float,
    target_log_prob: torch.Tensor,
    behaviour_log_prob: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace value targets ``v_s`` and policy-gradient advantages.

    All tensors are ``[B, T, 1]``; ``done`` marks any episode end (terminal or truncated) and
    cuts the trace, ``terminated`` alone stops bootstrapping from ``next_value``.

    Returns:
        ``(advantage [B, T, 1], vs [B, T, 1])`` with
        ``advantage_s = min(rho_bar, rho_s) (r_s + gamma v_{s+1} - V(x_s))``.
    """
    rho = (target_log_prob - behaviour_log_prob).exp()
    clipped_rho = rho.clamp_max(rho_bar)
    bootstrap = torch.where(terminated, 0.0, next_value)  # V(x_{s+1}); nothing after a termination
    delta = clipped_rho * (reward + gamma * bootstrap - value)  # rho_s (r_s + gamma V(x_{s+1}) - V(x_s))
    trace = (gamma * rho.clamp_max(c_bar)).masked_fill_(done, 0.0)  # gamma c_s, cut at every episode end
    # vs_s - V(x_s) = delta_s + gamma c_s (vs_{s+1} - V(x_{s+1})), scanned back over time-major rows
    d, c = delta.squeeze(-1).t().contiguous(), trace.squeeze(-1).t().contiguous()  # [T, B]
    acc = torch.empty_like(d)
    d_s, c_s, acc_s = d.unbind(0), c.unbind(0), acc.unbind(0)
    acc_s[-1].copy_(d_s[-1])
    for s in range(d.shape[0] - 2, -1, -1):
        torch.addcmul(d_s[s], c_s[s], acc_s[s + 1], out=acc_s[s])
    vs = acc.t().unsqueeze(-1) + value
    # v_{s+1}: the next target inside an episode, V(x_{s+1}) at the unroll's end and at episode ends
    vs_next = torch.where(done, next_value, torch.cat([vs[:, 1:], next_value[:, -1:]], dim=1))
    advantage = clipped_rho * (reward + gamma * torch.where(terminated, 0.0, vs_next) - value)
    return advantage, vs


def next_values(model: torch.nn.Module, batch: TensorDict, value: torch.Tensor) -> torch.Tensor:
    """``V(x_{s+1}) [B, T, 1]`` of ``("next", "observation")``, reusing ``value [B, T, 1]`` of the observations.

    Inside an unroll the next observation is the following step's observation except where an
    episode ended, so only the last column and the ended steps need a forward of their own: over
    a conv torso that is most of a forward saved per update (a quarter of the learner's work).
    When a batch does not have that shape (a user's sampler, a recurrent core whose ``value``
    replays its states) every next observation is evaluated, as before.
    """
    obs, nxt = batch[keys.OBSERVATION], batch[keys.NEXT_OBSERVATION]
    if not isinstance(model, nn.Module) or getattr(model, "recurrent", False) or obs.shape[1] < 2:
        return model.value(nxt)
    done = batch[keys.DONE][..., 0]  # [B, T]
    fresh = torch.cat([done[:, :-1], torch.ones_like(done[:, -1:])], dim=1)  # steps whose next obs is new
    inner = ~fresh[:, :-1]
    if not torch.equal(nxt[:, :-1][inner], obs[:, 1:][inner]):
        return model.value(nxt)
    out = torch.cat([value[:, 1:], value[:, -1:]], dim=1).detach().clone()
    out[fresh] = model.value(nxt[fresh])
    return out


def impala_loss(model: torch.nn.Module, batch: TensorDict, hp) -> TensorDict:
    """Actor-critic loss of a ``[B, T]`` trajectory batch under the current ``model``.

    ``hp`` provides ``gamma, rho_bar, c_bar, value_coef, entropy_coef, normalize_advantage,
    reward_scale`` (:class:`distrl.recipes.impala.recipe.ImpalaConfig`, or SEED's config): every
    loss of a model takes ``(model, batch, hp)``.

    ``batch`` holds :data:`distrl.data.keys.IMPALA_IN_KEYS`: ``observation [B, T, F]``,
    ``action [B, T]`` (int64; ``[B, T, A]`` float32 under a Gaussian head: the model's ``head``,
    :mod:`distrl.nn.heads`, reads the policy's output), ``action_log_prob [B, T]`` (behaviour policy), ``("next", ...)`` entries
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
        next_value = next_values(model, batch, value)
    head = getattr(model, "head", None) or CategoricalHead(out.shape[-1])
    log_pi, entropy = head.log_prob_entropy(out, batch[keys.ACTION])  # [B, T] each
    log_pi = log_pi.unsqueeze(-1)  # [B, T, 1]
    log_mu = batch[keys.ACTION_LOG_PROB].unsqueeze(-1)
    with torch.no_grad():
        advantage, vs = vtrace_targets(
            hp.gamma, log_pi.detach(), log_mu, value.detach(), next_value,
            batch[keys.REWARD] * hp.reward_scale, batch[keys.DONE], batch[keys.TERMINATED], hp.rho_bar, hp.c_bar,
        )
    advantage_std = advantage.std()
    if hp.normalize_advantage:
        advantage = (advantage - advantage.mean()) / (advantage_std + 1e-8)
    loss_policy = -(advantage * log_pi).mean()
    loss_value = 0.5 * (vs - value).pow(2).mean()
    entropy = entropy.mean()
    loss = loss_policy + hp.value_coef * loss_value - hp.entropy_coef * entropy
    return TensorDict(
        loss=loss, loss_policy=loss_policy.detach(), loss_value=loss_value.detach(),
        entropy=entropy.detach(), rho_mean=(log_pi.detach() - log_mu).exp().mean(),
        advantage_std=advantage_std, value_mean=value.detach().mean(),
        logit_range=head.spread(out.detach()),
    )
