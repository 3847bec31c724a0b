"""A3C's n-step advantage actor-critic loss (Mnih et al., 2016, Algorithm S3).

A worker acts ``t_max`` steps with the parameters it pulled, then for every step ``i`` of the
segment forms the longest n-step return available inside it,

    R_i = r_i + gamma r_{i+1} + ... + gamma^{t-1-i} r_{t-1} + gamma^{t-i} V(s_t),

and ascends ``log pi(a_i|s_i) (R_i - V(s_i)) + beta H(pi(s_i))`` while regressing ``V(s_i)`` on
``R_i``. With a vector of envs that run on across episodes, an episode end inside the segment
restarts the sum there: a termination adds nothing after ``r_i``, a truncation adds
``gamma V(s'_i)`` of the true final observation (the episode did not end, the clock did).

That is TD(lambda) with ``lambda = 1``: ``R_i = r_i + gamma R_{i+1}``, bootstrapped from
``V(s'_i)`` at the segment's end and at truncations
(:func:`distrl.algorithms.estimators.n_step_advantage`); ``tests/test_a3c_math.py`` checks it and
the loss against a slow loop in the paper's notation. The loss is written as a pure function for
the same reason as IMPALA's (:mod:`distrl.algorithms.impala`): TorchRL's ``A2CLoss`` wants
``TensorDictModule`` actors.

The paper sums the per-step terms; here they are averaged over the ``B * T`` steps, so the
learning rate does not scale with ``envs_per_worker * t_max``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from distrl.algorithms.estimators import n_step_advantage
from distrl.data import keys


def a3c_loss(model: torch.nn.Module, batch: TensorDict, hp) -> TensorDict:
    """The n-step advantage actor-critic loss of a ``[B, T]`` segment batch under ``model``.

    ``hp`` provides ``gamma, value_coef, entropy_coef, normalize_advantage, reward_scale``
    (:class:`distrl.recipes.a3c.recipe.A3CConfig`).

    ``batch`` holds :data:`distrl.data.keys.A3C_IN_KEYS`: ``observation [B, T, F]``,
    ``action`` (``[B, T]`` int64, or ``[B, T, A]`` float32 for a Gaussian), and the ``("next", ...)``
    entries ``observation [B, T, F]``, ``reward``/``done``/``terminated`` ``[B, T, 1]``.
    ``model(obs) -> (out [*, width], value [*, 1])`` with ``out`` read by ``model.head``
    (:mod:`distrl.nn.heads`: logits or a Gaussian's mean and log-std), and ``model.value(obs) -> [*, 1]``;
    it must be the policy that acted (A3C is on-policy).

    ``L = -mean(A_i log pi(a_i|s_i)) + value_coef * mean((R_i - V(s_i))^2) / 2 - entropy_coef * mean(H_i)``
    with ``A_i = R_i - V(s_i)`` held constant (:func:`n_step_advantage`). ``normalize_advantage``
    rescales the batch's ``A_i`` to zero mean and unit variance first. Rewards are multiplied by
    ``reward_scale`` (the critic then learns values in scaled units, as the impala loss does).

    Returns a TensorDict of scalars: ``loss`` (to minimise, with its graph), ``loss_policy``,
    ``loss_value``, ``entropy``, ``advantage_mean`` (detached).
    """
    out, value = model(batch[keys.OBSERVATION])  # [B, T, width], [B, T, 1]
    with torch.no_grad():
        next_value = model.value(batch[keys.NEXT_OBSERVATION])
        advantage, returns = n_step_advantage(
            hp.gamma,
            value.detach(),
            next_value,
            batch[keys.REWARD] * hp.reward_scale,
            batch[keys.DONE],
            batch[keys.TERMINATED],
        )
        raw_mean = advantage.mean()
        if hp.normalize_advantage:
            advantage = (advantage - raw_mean) / (advantage.std() + 1e-8)
    log_pi, entropy = model.head.log_prob_entropy(out, batch[keys.ACTION])  # [B, T] each
    loss_policy = -(advantage.squeeze(-1) * log_pi).mean()
    loss_value = 0.5 * (returns - value).pow(2).mean()
    entropy = entropy.mean()
    loss = loss_policy + hp.value_coef * loss_value - hp.entropy_coef * entropy
    return TensorDict(
        loss=loss,
        loss_policy=loss_policy.detach(),
        loss_value=loss_value.detach(),
        entropy=entropy.detach(),
        advantage_mean=raw_mean,
    )
