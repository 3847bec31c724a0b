"""APPO: PPO's clipped objective on asynchronous, lagged ``[B, T]`` trajectories (Sample
Factory's learner), with V-trace value targets as the off-policy correction or GAE without one.

The clipped surrogate is :func:`distrl.algorithms.ppo.ppo_loss`, unchanged. What is new is where
the advantages come from on data a lagged policy collected:

- ``vtrace=True``: value targets ``v_s`` are V-trace's (:func:`distrl.algorithms.estimators.vtrace_targets`)
  and the advantage is ``r_s + gamma v_{s+1} - V(x_s)``
  (:func:`~distrl.algorithms.estimators.vtrace_pg_advantage`; Sample Factory's choice: the importance
  ratio enters once, through PPO's clipped ratio, not a second time through V-trace's ``rho``);
  ``v_{s+1}`` is the next step's target, or ``V(x_{s+1})`` at the unroll's end and at episode ends
  (a truncation bootstraps from the true final observation; a termination from nothing);
- ``vtrace=False``: GAE(lambda) under the current critic (:func:`~distrl.algorithms.estimators.gae`),
  as on-policy PPO would.

:func:`appo_loss` recomputes the advantages under the critic of every minibatch, so a minibatch
must hold whole rows. :func:`batch_gae` + :func:`appo_sample_loss` are the other layout (PPO's and
CleanRL's; ``algo.minibatch=samples``): GAE once per batch, under the network as the batch
arrives, then minibatches of single samples drawn across every row and step of it.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from distrl.algorithms.estimators import gae, next_values, vtrace_pg_advantage, vtrace_targets
from distrl.algorithms.ppo import ppo_loss
from distrl.data import keys


def _in_reward_units(model: torch.nn.Module, value: torch.Tensor) -> torch.Tensor:
    """The critic's ``value [*B, 1]`` in reward units: denormalised under ``net.value_norm=on``
    (the model's ``value_norm``), as it is otherwise."""
    norm = getattr(model, "value_norm", None)
    return value if norm is None else norm.denormalize(value)


def _as_predicted(model: torch.nn.Module, target: torch.Tensor) -> torch.Tensor:
    """Value targets ``[*B]`` in the units the critic predicts: standardised under ``net.value_norm=on``."""
    norm = getattr(model, "value_norm", None)
    return target if norm is None else norm(target.unsqueeze(-1)).squeeze(-1)


def appo_loss(model: torch.nn.Module, batch: TensorDict, algo) -> TensorDict:
    """The APPO loss of a ``[B, T]`` batch (:data:`distrl.data.keys.IMPALA_IN_KEYS`) under ``model``.

    The batch's rows are whole unrolls in order: ``next.observation[:, t]`` is ``observation[:, t+1]``
    wherever step ``t`` did not end an episode
    (:func:`~distrl.algorithms.estimators.next_values` relies on it, unchecked).

    ``algo`` provides ``gamma, vtrace, gae_lambda, rho_bar, c_bar, clip_eps, reward_scale,
    value_coef, entropy_coef, normalize_advantage`` (:class:`distrl.recipes.sf.recipe.SFConfig`).
    Log-probabilities and entropies come from ``model.head`` (:mod:`distrl.nn.heads`): int64 actions
    ``[B, T]`` under a categorical head, float32 ``[B, T, A]`` under a Gaussian one.
    Rewards are multiplied by ``reward_scale`` first (values in scaled units; see impala_loss).

    Returns scalars: ``loss`` and ``loss_policy``, ``loss_value``, ``entropy``, ``approx_kl``,
    ``clip_fraction``, ``advantage_std`` (before any normalisation), ``value_mean``.
    """
    out, value = model(batch[keys.OBSERVATION])  # [B, T, head.width], [B, T, 1]
    log_pi, entropy = model.head.log_prob_entropy(out, batch[keys.ACTION])  # [B, T] each: one softmax
    log_pi = log_pi.unsqueeze(-1)  # [B, T, 1]
    log_mu = batch[keys.ACTION_LOG_PROB].unsqueeze(-1)
    reward = batch[keys.REWARD] * algo.reward_scale
    done, terminated = batch[keys.DONE], batch[keys.TERMINATED]
    with torch.no_grad():  # the estimators work in reward units (net.value_norm: the critic's are standardised)
        next_value = _in_reward_units(
            model, next_values(model.value, value.detach(), batch[keys.NEXT_OBSERVATION], done)
        )
        v = _in_reward_units(model, value.detach())
        if algo.vtrace:
            _, vs = vtrace_targets(
                algo.gamma, log_pi.detach(), log_mu, v, next_value, reward, done, terminated, algo.rho_bar, algo.c_bar
            )
            advantage = vtrace_pg_advantage(vs, next_value, v, reward, done, terminated, algo.gamma)
        else:  # GAE wants time-major [T, B]
            tm = lambda x: x.squeeze(-1).transpose(0, 1)  # noqa: E731
            adv, target = gae(algo.gamma, algo.gae_lambda, tm(v), tm(next_value), tm(reward), tm(done), tm(terminated))
            advantage, vs = adv.transpose(0, 1).unsqueeze(-1), target.transpose(0, 1).unsqueeze(-1)
    advantage_std = advantage.std()
    if algo.normalize_advantage:
        advantage = (advantage - advantage.mean()) / (advantage_std + 1e-8)
    out = ppo_loss(
        log_pi.reshape(-1),
        log_mu.reshape(-1),
        advantage.reshape(-1),
        value.reshape(-1),
        _as_predicted(model, vs.reshape(-1)),
        entropy.reshape(-1),
        algo.clip_eps,
        algo.value_coef,
        algo.entropy_coef,
    )
    out = {k: (v if k == keys.LOSS else v.detach()) for k, v in out.items()}
    return TensorDict(**out, advantage_std=advantage_std, value_mean=value.detach().mean())


@torch.no_grad()
def batch_gae(model: torch.nn.Module, batch: TensorDict, algo) -> TensorDict:
    """The ``[B, T]`` batch flattened to ``[B * T]`` samples, each with its GAE(lambda)
    ``advantage`` and ``value_target`` (:data:`distrl.data.keys.ADVANTAGE`, ``VALUE_TARGET``) under
    ``model`` now, for :func:`appo_sample_loss`. One forward of the critic over the batch (and its
    rows' last next observations); rewards multiplied by ``algo.reward_scale``. Targets are in reward
    units whatever ``net.value_norm`` says: the learner folds them into the model's ``value_norm``,
    and the loss standardises them."""
    out, value = model(batch[keys.OBSERVATION])  # [B, T, head.width], [B, T, 1]
    done, terminated = batch[keys.DONE], batch[keys.TERMINATED]
    next_value = _in_reward_units(model, next_values(model.value, value, batch[keys.NEXT_OBSERVATION], done))
    value = _in_reward_units(model, value)
    tm = lambda x: x.squeeze(-1).transpose(0, 1)  # noqa: E731  GAE wants time-major [T, B]
    reward = batch[keys.REWARD] * algo.reward_scale
    adv, target = gae(algo.gamma, algo.gae_lambda, tm(value), tm(next_value), tm(reward), tm(done), tm(terminated))
    flat = batch.select(keys.OBSERVATION, keys.ACTION, keys.ACTION_LOG_PROB).reshape(-1)
    flat[keys.ADVANTAGE] = adv.transpose(0, 1).reshape(-1)
    flat[keys.VALUE_TARGET] = target.transpose(0, 1).reshape(-1)
    flat[keys.PROXIMAL_LOG_PROB] = model.head.log_prob_entropy(out, batch[keys.ACTION])[0].reshape(-1)
    return flat


def appo_sample_loss(model: torch.nn.Module, samples: TensorDict, algo) -> TensorDict:
    """The PPO loss of ``[N]`` samples from :func:`batch_gae` under ``model``: the clipped surrogate
    on the stored advantages (normalised over these samples when ``algo.normalize_advantage``);
    with ``algo.decoupled``, decoupled PPO's (Hilton et al., 2021, "Batch size-invariance for policy optimization"):
    ``E[min(pi_prox / mu, rho_bar) min(r A, clip(r, 1 - eps, 1 + eps) A)]``, ``r = pi / pi_prox``, the
    proximal policy ``pi_prox`` the network as the batch arrived (:func:`batch_gae`): a lagged sample's
    ratio starts at 1, where against the behaviour policy ``mu`` dozens of updates old it starts
    clipped, its gradient zero;
    the value regressed on the stored targets (standardised by the model's ``value_norm`` when it has
    one), the entropy bonus. Returns what :func:`appo_loss` returns (``value_mean`` in the critic's units)."""
    out, value = model(samples[keys.OBSERVATION])  # [N, head.width], [N, 1]
    log_pi, entropy = model.head.log_prob_entropy(out, samples[keys.ACTION])  # [N] each
    advantage = samples[keys.ADVANTAGE]
    advantage_std = advantage.std()
    if algo.normalize_advantage:
        advantage = (advantage - advantage.mean()) / (advantage_std + 1e-8)
    old_log_prob = samples[keys.ACTION_LOG_PROB]
    if algo.decoupled:  # min(r A, clip(r) A) with r = pi / pi_prox, weighted by pi_prox / mu (w > 0 factors out)
        proximal = samples[keys.PROXIMAL_LOG_PROB]
        advantage = advantage * (proximal - old_log_prob).exp().clamp(max=algo.rho_bar)
        old_log_prob = proximal
    out = ppo_loss(
        log_pi,
        old_log_prob,
        advantage,
        value.squeeze(-1),
        _as_predicted(model, samples[keys.VALUE_TARGET]),
        entropy,
        algo.clip_eps,
        algo.value_coef,
        algo.entropy_coef,
    )
    out = {k: (v if k == keys.LOSS else v.detach()) for k, v in out.items()}
    return TensorDict(**out, advantage_std=advantage_std, value_mean=value.detach().mean())
