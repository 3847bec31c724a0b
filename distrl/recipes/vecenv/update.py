"""vecenv's data-parallel PPO update: the step every rank takes in lockstep on its own samples.

Data parallelism is explicit: every rank computes gradients on its own samples, the flattened
gradient is all-reduced and averaged, and every rank steps its own optimizer on the identical
result (:func:`allreduce_gradients`). Advantages are normalised with statistics over all ranks
(:func:`normalize_advantage`), so ``W`` ranks with ``N`` samples each take the update one rank
would take on ``W * N`` (``tests/test_vecenv_ddp.py`` checks it on 2 gloo ranks).

The math is the algorithms': PPO's clipped loss and epoch loop (:mod:`distrl.algorithms.ppo`), GAE
(:mod:`distrl.algorithms.estimators`); what lives here is what the ranks do together.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

import torch
import torch.distributed as dist
from tensordict import TensorDict
from torch import nn

from distrl.algorithms.ppo import minibatches, ppo_loss
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
    clip_value: bool  #: the clipped value loss (the batch then holds ``state_value``)
    minibatch_adv_norm: bool  #: normalise each minibatch's advantages (else they come normalised)


def world_size() -> int:
    """Ranks of the default process group, 1 without one (a plain one-process run)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def normalize_advantage(adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(adv - mean) / (std + eps)`` of ``adv [*N]`` with mean and (population) std over every rank's samples."""
    moments = torch.stack(
        [adv.sum(), adv.square().sum(), torch.tensor(adv.numel(), dtype=adv.dtype, device=adv.device)]
    )
    if world_size() > 1:
        dist.all_reduce(moments)
    mean = moments[0] / moments[2]
    var = (moments[1] / moments[2] - mean.square()).clamp_min(0.0)
    return (adv - mean) / (var.sqrt() + eps)


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
        p.grad = flat[offset : offset + g.numel()].view_as(g)
        offset += g.numel()


def ppo_update(
    model: nn.Module,
    optim: torch.optim.Optimizer,
    batch: TensorDict,
    hp: PPOHyper,
    is_finite: Optional[Callable[[torch.Tensor], bool]] = None,
) -> torch.Tensor:
    """``hp.epochs`` passes of ``hp.num_minibatches`` shuffled minibatches over a flat batch
    (:func:`distrl.algorithms.ppo.minibatches`), each step's gradient all-reduced before the clip.

    Args:
        model: an actor-critic (:class:`distrl.nn.models.ActorCritic`: ``evaluate`` and ``value``).
        batch: ``[N]`` TensorDict with :data:`distrl.data.keys.PPO_IN_KEYS` (and ``state_value``
            under ``hp.clip_value``); ``advantage`` already normalized (:func:`normalize_advantage`)
            unless ``hp.minibatch_adv_norm``. Every rank must hold the same ``N``.
        is_finite: decides from the reduced gradient norm (a 0-dim tensor) whether to step; the
            rank-0 learner passes its session's check, which counts and stops on a streak.

    Returns:
        The mean of :data:`UPDATE_STATS` over the minibatches, a ``[7]`` tensor on the batch's
        device (moved to the host by the caller, once).
    """
    is_finite = is_finite or (lambda g: bool(torch.isfinite(g)))
    params = [p for p in model.parameters() if p.requires_grad]
    wire_dtype = getattr(torch, hp.allreduce_dtype)
    stats = []
    for mb in minibatches(batch, hp.epochs, hp.num_minibatches):
        log_prob, entropy, value = model.evaluate(mb[keys.OBSERVATION], mb[keys.ACTION])
        adv = mb[keys.ADVANTAGE]
        if hp.minibatch_adv_norm:  # this rank's minibatch alone, as one-process PPO code does it
            adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
        out = ppo_loss(
            log_prob,
            mb[keys.ACTION_LOG_PROB],
            adv,
            value,
            mb[keys.VALUE_TARGET],
            entropy,
            hp.clip_eps,
            hp.value_coef,
            hp.entropy_coef,
            old_value=mb[keys.STATE_VALUE] if hp.clip_value else None,
        )
        optim.zero_grad(set_to_none=True)
        out[keys.LOSS].backward()
        allreduce_gradients(params, wire_dtype)
        grad_norm = nn.utils.clip_grad_norm_(params, hp.max_grad_norm)
        if is_finite(grad_norm):  # identical on every rank: the gradient was reduced first
            optim.step()
        stats.append(torch.stack([out[name].detach() for name in UPDATE_STATS[:-1]] + [grad_norm]))
    return torch.stack(stats).mean(0)
