"""PPO (Schulman et al., 2017): the clipped surrogate, and the epoch loop over minibatches.

The clipped objective is written here rather than taken from TorchRL's ``ClipPPOLoss``: that loss
wants the actor and critic as ``TensorDictModule``s and rebuilds a distribution object through
TensorDict dispatch on every minibatch, which measured 2-4 ms more per minibatch of 1024-4096
samples on these CPUs (40-100% of the minibatch's own cost); the objective itself is six lines.
``tests/test_vecenv_ppo.py`` checks it against ``ClipPPOLoss`` and against a slow loop in the
paper's notation. Its advantages come from :mod:`distrl.algorithms.estimators` (GAE, or V-trace
under APPO: :mod:`distrl.algorithms.appo`).

:func:`minibatches` is PPO's epoch loop, the one both PPO learners run: ``vecenv``'s data-parallel
update (:mod:`distrl.recipes.vecenv.update`) and ``sf``'s APPO learner.
"""

from __future__ import annotations

from typing import Iterator

import torch
from tensordict import TensorDict

from distrl.data import keys


def ppo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantage: torch.Tensor,
    value: torch.Tensor,
    value_target: torch.Tensor,
    entropy: torch.Tensor,
    clip_eps: float,
    value_coef: float,
    entropy_coef: float,
    old_value: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The clipped surrogate, the value regression and the entropy bonus, averaged over ``[N]``.

    ``L = -E[min(rho A, clip(rho, 1-eps, 1+eps) A)] + c_v E[(V - V_targ)^2] / 2 - c_e E[H]``
    with ``rho = exp(log_prob - old_log_prob)``. All inputs are ``[N]``.

    With ``old_value`` (``V`` at the rollout), the value term is the clipped one of PPO's reference
    code (OpenAI baselines' ``ppo2``; gymnax-blines and CleanRL keep it):
    ``E[max((V - V_targ)^2, (V_old + clip(V - V_old, -eps, eps) - V_targ)^2)] / 2``.

    Returns scalars ``loss`` (to minimise), ``loss_policy``, ``loss_value``, ``entropy``,
    ``approx_kl`` (``E[(rho - 1) - log rho]``, an unbiased KL(old||new) estimate) and
    ``clip_fraction``.
    """
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    loss_policy = -torch.min(ratio * advantage, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantage).mean()
    loss_value = (value - value_target).square()
    if old_value is not None:
        clipped = old_value + (value - old_value).clamp(-clip_eps, clip_eps)
        loss_value = torch.maximum(loss_value, (clipped - value_target).square())
    loss_value = 0.5 * loss_value.mean()
    entropy = entropy.mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip_eps).float().mean()
    return {
        keys.LOSS: loss_policy + value_coef * loss_value - entropy_coef * entropy,
        "loss_policy": loss_policy,
        "loss_value": loss_value,
        "entropy": entropy,
        "approx_kl": approx_kl,
        "clip_fraction": clip_fraction,
    }


def minibatches(batch: TensorDict, epochs: int, num_minibatches: int) -> Iterator[TensorDict]:
    """PPO's epoch loop: ``epochs`` passes over ``batch`` ``[N, *]``, each cut into ``num_minibatches``
    minibatches of its rows in a fresh random order (``TensorDict.chunk``'s sizes: ``ceil(N / k)``, the
    last one smaller when ``k`` does not divide ``N``). A row stays whole: a ``[N, T]`` batch of
    unrolls is shuffled by unroll, as GAE and V-trace need the steps in sequence.

    One gather per epoch, then minibatches are contiguous views: a gather per minibatch cost ~50 us
    a key at 2048 rows, a fifth of the minibatch's backward on these CPUs. One minibatch is the
    batch as it is (no shuffle, no gather): the order of the rows does not change a mean.
    """
    for _ in range(epochs):
        if num_minibatches == 1:
            yield batch
            continue
        order = torch.randperm(batch.shape[0], device=batch.device)
        yield from batch.apply(lambda x: x.index_select(0, order)).chunk(num_minibatches)
