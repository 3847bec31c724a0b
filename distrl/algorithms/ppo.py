"""PPO (Schulman et al., 2017): GAE targets, the clipped surrogate, and a data-parallel update.

GAE is TorchRL's ``generalized_advantage_estimate`` (a pure function of tensors, episode ends
and truncation included). The clipped objective is written here rather than taken from
TorchRL's ``ClipPPOLoss``: that loss wants the actor and critic as ``TensorDictModule``s and
rebuilds a distribution object through TensorDict dispatch on every minibatch, which measured
2-4 ms more per minibatch of 1024-4096 samples on these CPUs (40-100% of the minibatch's own
cost); the objective itself is six lines. ``tests/test_vecenv_ppo.py`` checks it against ``ClipPPOLoss`` and
against a slow loop in the paper's notation.

Data parallelism is explicit: every rank computes gradients on its own samples, the flattened
gradient is all-reduced and averaged, and every rank steps its own optimizer on the identical
result (see :func:`allreduce_gradients`). Advantages are normalized with statistics over all
ranks, so ``W`` ranks with ``N`` samples each take the update one rank would take on ``W * N``.
"""
from __future__ import annotations

from typing import Callable, Optional, Protocol

import torch
import torch.distributed as dist
from tensordict import TensorDict
from torch import nn
from torchrl.objectives.value.functional import generalized_advantage_estimate

from distrl.data import keys

#: The order of the statistics :func:`ppo_update` returns.
UPDATE_STATS = ("loss", "loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction", "grad_norm")


class PPOHyper(Protocol):
    """The hyperparameters :func:`ppo_update` reads (``VecEnvConfig`` provides them)."""

    epochs: int
    num_minibatches: int
    clip_eps: float
    value_coef: float
    entropy_coef: float
    max_grad_norm: float
    allreduce_dtype: str  #: "float32" or "bfloat16": the dtype gradients cross the wire in


def world_size() -> int:
    """Ranks of the default process group, 1 without one (a plain one-process run)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gae(gamma: float, lmbda: float, value: torch.Tensor, next_value: torch.Tensor, reward: torch.Tensor,
        done: torch.Tensor, terminated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) advantages and value targets of a time-major rollout.

    Args:
        value, next_value: ``V(s_t)`` and ``V(s_{t+1})`` ``[T, B]``; ``next_value`` is the value of
            the true next observation, also where the episode was truncated.
        reward: ``r_t`` ``[T, B]``.
        done: ``[T, B]`` bool, any episode end (cuts the trace); ``terminated`` ``[T, B]`` bool,
            a true terminal state (no bootstrap from ``next_value``).

    Returns:
        ``(advantage [T, B], value_target [T, B])`` with ``value_target = advantage + value``.
    """
    adv, target = generalized_advantage_estimate(
        gamma, lmbda, value.unsqueeze(-1), next_value.unsqueeze(-1), reward.unsqueeze(-1),
        done.unsqueeze(-1), terminated.unsqueeze(-1), time_dim=0,
    )
    return adv.squeeze(-1), target.squeeze(-1)


def normalize_advantage(adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(adv - mean) / (std + eps)`` with mean and (population) std over every rank's samples."""
    moments = torch.stack([adv.sum(), adv.square().sum(), torch.tensor(adv.numel(), dtype=adv.dtype, device=adv.device)])
    if world_size() > 1:
        dist.all_reduce(moments)
    mean = moments[0] / moments[2]
    var = (moments[1] / moments[2] - mean.square()).clamp_min(0.0)
    return (adv - mean) / (var.sqrt() + eps)


def ppo_loss(log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantage: torch.Tensor, value: torch.Tensor,
             value_target: torch.Tensor, entropy: torch.Tensor, clip_eps: float, value_coef: float,
             entropy_coef: float) -> dict[str, torch.Tensor]:
    """The clipped surrogate, the value regression and the entropy bonus, averaged over ``[N]``.

    ``L = -E[min(rho A, clip(rho, 1-eps, 1+eps) A)] + c_v E[(V - V_targ)^2] / 2 - c_e E[H]``
    with ``rho = exp(log_prob - old_log_prob)``. All inputs are ``[N]``.

    Returns scalars ``loss`` (to minimise), ``loss_policy``, ``loss_value``, ``entropy``,
    ``approx_kl`` (``E[(rho - 1) - log rho]``, an unbiased KL(old||new) estimate) and
    ``clip_fraction``.
    """
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    loss_policy = -torch.min(ratio * advantage, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantage).mean()
    loss_value = 0.5 * (value - value_target).square().mean()
    entropy = entropy.mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip_eps).float().mean()
    return {keys.LOSS: loss_policy + value_coef * loss_value - entropy_coef * entropy, "loss_policy": loss_policy,
            "loss_value": loss_value, "entropy": entropy, "approx_kl": approx_kl, "clip_fraction": clip_fraction}


def allreduce_gradients(params: list[nn.Parameter], dtype: torch.dtype = torch.float32) -> None:
    """Average every parameter's gradient over the ranks, in one flat all-reduce.

    ``dtype`` is the wire's: ``torch.bfloat16`` halves the bytes (the sum is then rounded to 8
    mantissa bits, far below the minibatch noise of the gradient; the result is still the same on
    every rank), and the gradients are made float32 again before clipping and the step.

    Why not ``DistributedDataParallel``: the update calls ``model.evaluate`` (policy and value),
    not ``forward``, and DDP only arms its reduction inside ``forward``; the model is a few
    thousand parameters, which DDP would also put in a single bucket; and this way the reduced
    gradient (hence the non-finite check on it) is bitwise the same on every rank.
    """
    n = world_size()
    if n == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    if dtype != flat.dtype:
        wire = flat.to(dtype)
        dist.all_reduce(wire)
        flat = wire.to(flat.dtype)
    else:
        dist.all_reduce(flat)
    flat.div_(n)
    offset = 0
    for p, g in zip(params, grads):
        p.grad = flat[offset:offset + g.numel()].view_as(g)
        offset += g.numel()


def ppo_update(model: nn.Module, optim: torch.optim.Optimizer, batch: TensorDict, hp: PPOHyper,
               is_finite: Optional[Callable[[torch.Tensor], bool]] = None) -> torch.Tensor:
    """``hp.epochs`` passes of ``hp.num_minibatches`` shuffled minibatches over a flat batch.

    Args:
        model: an actor-critic of :mod:`distrl.nn.policies` (``evaluate`` and ``value``).
        batch: ``[N]`` TensorDict with :data:`distrl.data.keys.PPO_IN_KEYS`; ``advantage`` already
            normalized (:func:`normalize_advantage`). Every rank must hold the same ``N``.
        is_finite: decides from the reduced gradient norm (a 0-dim tensor) whether to step; the
            rank-0 learner passes its session's check, which counts and stops on a streak.

    Returns:
        The mean of :data:`UPDATE_STATS` over the minibatches, a ``[7]`` tensor on the batch's
        device (moved to the host by the caller, once).
    """
    is_finite = is_finite or (lambda g: bool(torch.isfinite(g)))
    params = [p for p in model.parameters() if p.requires_grad]
    wire_dtype = getattr(torch, hp.allreduce_dtype)
    n = batch.batch_size[0]
    size = n // hp.num_minibatches
    stats = []
    for _ in range(hp.epochs):
        # One gather per epoch, then minibatches are contiguous views: a gather per minibatch
        # cost ~50 us a key at 2048 rows, a fifth of the minibatch's backward here.
        order = torch.randperm(n, device=batch.device)
        shuffled = batch.apply(lambda x: x.index_select(0, order))
        for k in range(hp.num_minibatches):
            mb = shuffled[k * size:(k + 1) * size]
            obs = mb[keys.OBSERVATION]
            log_prob, entropy, value = model.evaluate(obs, mb[keys.ACTION])
            out = ppo_loss(log_prob, mb[keys.ACTION_LOG_PROB], mb[keys.ADVANTAGE], value,
                           mb[keys.VALUE_TARGET], entropy, hp.clip_eps, hp.value_coef, hp.entropy_coef)
            optim.zero_grad(set_to_none=True)
            out[keys.LOSS].backward()
            allreduce_gradients(params, wire_dtype)
            grad_norm = nn.utils.clip_grad_norm_(params, hp.max_grad_norm)
            if is_finite(grad_norm):  # identical on every rank: the gradient was reduced first
                optim.step()
            stats.append(torch.stack([out[name].detach() for name in UPDATE_STATS[:-1]] + [grad_norm]))
    return torch.stack(stats).mean(0)
