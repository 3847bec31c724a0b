"""APPO: PPO's clipped objective on asynchronous, lagged ``[B, T]`` trajectories (Sample
Factory's learner), with V-trace value targets as the off-policy correction or GAE without one.

The clipped surrogate is :func:`distrl.algorithms.ppo.ppo_loss`, unchanged. What is new is where
the advantages come from on data a lagged policy collected:

- ``vtrace=True``: value targets ``v_s`` are V-trace's (:func:`distrl.algorithms.impala.vtrace_targets`)
  and the advantage is ``r_s + gamma v_{s+1} - V(x_s)`` (Sample Factory's choice: the importance
  ratio enters once, through PPO's clipped ratio, not a second time through V-trace's ``rho``);
  ``v_{s+1}`` is the next step's target, or ``V(x_{s+1})`` at the unroll's end and at episode ends
  (a truncation bootstraps from the true final observation; a termination from nothing);
- ``vtrace=False``: GAE(lambda) under the current critic, as on-policy PPO would.
"""
from __future__ import annotations

import torch
from tensordict import TensorDict

from distrl.algorithms.impala import vtrace_targets
from distrl.algorithms.ppo import gae, ppo_loss
from distrl.data import keys


def vtrace_pg_advantage(vs: torch.Tensor, next_value: torch.Tensor, value: torch.Tensor, reward: torch.Tensor,
                        done: torch.Tensor, terminated: torch.Tensor, gamma: float) -> torch.Tensor:
    """``r_s + gamma (1 - term_s) v'_{s+1} - V(x_s)``, all ``[B, T, 1]``.

    ``v'_{s+1}`` is ``vs[:, s+1]`` inside an episode and the unroll, ``next_value[:, s]`` (the
    critic at the true next observation) at the unroll's last step and where the episode ended.
    """
    vs_next = torch.cat([vs[:, 1:], next_value[:, -1:]], dim=1)
    vs_next = torch.where(done, next_value, vs_next)
    return reward + gamma * (~terminated).float() * vs_next - value


def next_values(value_fn, value: torch.Tensor, next_obs: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
    """``V(next_obs)`` ``[B, T, 1]``, given ``value = V(obs)`` ``[B, T, 1]`` and ``next_obs [B, T, F]``.

    Inside an episode a step's next observation *is* the following step's observation (a rollout
    worker writes both from one env output), so ``V(next_obs[:, t]) = value[:, t + 1]`` there, and
    the critic only runs where they differ: the unroll's last step and the episode ends (the true
    final observation, not the reset one). On CartPole's ``T = 32`` that is about 1/30 of the rows:
    one forward pass of three saved per update. ``value_fn``: ``[N, F] -> [N, 1]``.
    """
    out = torch.cat([value[:, 1:], value[:, -1:]], dim=1)
    need = done.squeeze(-1).clone()  # [B, T]
    need[:, -1] = True
    out[need] = value_fn(next_obs[need]).to(out.dtype)
    return out


def appo_loss(model: torch.nn.Module, batch: TensorDict, algo) -> TensorDict:
    """The APPO loss of a ``[B, T]`` batch (:data:`distrl.data.keys.IMPALA_IN_KEYS`) under ``model``.

    The batch's rows are whole unrolls in order: ``next.observation[:, t]`` is ``observation[:, t+1]``
    wherever step ``t`` did not end an episode (:func:`next_values` relies on it).

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
    with torch.no_grad():
        next_value = next_values(model.value, value.detach(), batch[keys.NEXT_OBSERVATION], done)
        if algo.vtrace:
            _, vs = vtrace_targets(algo.gamma, log_pi.detach(), log_mu, value.detach(), next_value, reward, done,
                                   terminated, algo.rho_bar, algo.c_bar)
            advantage = vtrace_pg_advantage(vs, next_value, value.detach(), reward, done, terminated, algo.gamma)
        else:  # GAE wants time-major [T, B]
            tm = lambda x: x.squeeze(-1).transpose(0, 1)  # noqa: E731
            adv, target = gae(algo.gamma, algo.gae_lambda, tm(value.detach()), tm(next_value), tm(reward), tm(done),
                              tm(terminated))
            advantage, vs = adv.transpose(0, 1).unsqueeze(-1), target.transpose(0, 1).unsqueeze(-1)
    advantage_std = advantage.std()
    if algo.normalize_advantage:
        advantage = (advantage - advantage.mean()) / (advantage_std + 1e-8)
    out = ppo_loss(log_pi.reshape(-1), log_mu.reshape(-1), advantage.reshape(-1), value.reshape(-1), vs.reshape(-1),
                   entropy.reshape(-1), algo.clip_eps, algo.value_coef, algo.entropy_coef)
    out = {k: (v if k == keys.LOSS else v.detach()) for k, v in out.items()}
    return TensorDict(**out, advantage_std=advantage_std, value_mean=value.detach().mean())
