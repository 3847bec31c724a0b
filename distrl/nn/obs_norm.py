"""Observation normalisation whose statistics come from every actor and reach every actor.

One :class:`ObsNorm` sits at the front of a flat-observation network. Its statistics are merged
**at the learner** from the data of every actor (the learner trains on all of it; A3C's parameter
server, which sees no data, merges the moments its workers send with their gradients; ``vecenv``'s
ranks all-reduce theirs), by the parallel algorithm of Chan et al. (1979) (:func:`merge_moments`).

Why the statistics are frozen ``nn.Parameter``s and not buffers: everything that publishes a policy
ships its parameters (sf's shared-memory vector and A3C's flat vector hold ``parameters()`` only;
impala's replies, checkpoints and exported policies hold the state dict), so as parameters they
reach actors and inference **with the weights of the same version**, whatever the recipe. They
have no gradient: optimizers and gradient clipping skip them. float32, as every parameter vector:
merging in float32 keeps the mean to ~1e-7 of its scale, far below what normalisation needs.

The statistics change only between updates (the learner folds a batch in after the step that
trained on it), so a behaviour policy and the learner's re-evaluation of the same version
normalise alike, and a lagging actor's difference is part of what V-trace and PPO's ratio correct.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import nn


def batch_moments(x: torch.Tensor, event_dims: int = 1) -> torch.Tensor:
    """``[count, sum_f x, sum_f x^2]`` of observations ``[*B, *E]`` (``E`` their last ``event_dims``
    dimensions, ``F = prod(E)``: 1 for flat ones, 3 for images) as one float64 vector ``[1 + 2F]``:
    additive, so the moments of many batches (or ranks) are their sum."""
    x = x.reshape(-1, math.prod(x.shape[x.dim() - event_dims :])).double()
    return torch.cat([x.new_tensor([x.shape[0]]), x.sum(0), x.square().sum(0)])


def merge_moments(
    count: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    n: torch.Tensor,
    batch_mean: torch.Tensor,
    batch_var: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chan et al.'s parallel merge of two sets' ``(count, mean, population variance)``:
    ``mean = mean_a + delta n_b / n``, ``M2 = M2_a + M2_b + delta^2 n_a n_b / n``, ``delta = mean_b - mean_a``."""
    total = count + n
    delta = batch_mean - mean
    new_mean = mean + delta * n / total
    new_var = (var * count + batch_var * n + delta.square() * count * n / total) / total
    return total, new_mean, new_var


class ObsNorm(nn.Module):
    """``clamp((obs - mean) / sqrt(var + 1e-8), -clip, clip)`` over ``[*B, *E]``, with running
    statistics ``mean [*E]``, ``var [*E]``, ``count [1]`` (frozen parameters: see the module docstring).
    ``E`` is ``(F,)`` for flat observations (``obs_shape`` an int), ``(C, H, W)`` for images: each
    pixel of each channel its own statistics (Sample Factory's ``normalize_input``), over the raw
    values (uint8 images come in as 0-255 floats and leave standardised, so the encoder does not
    scale them again)."""

    def __init__(self, obs_shape: int | tuple[int, ...], clip: float = 10.0):
        super().__init__()
        shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        self.clip = clip
        self.count = nn.Parameter(torch.full((), 1e-4), requires_grad=False)
        self.mean = nn.Parameter(torch.zeros(shape), requires_grad=False)
        self.var = nn.Parameter(torch.ones(shape), requires_grad=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not obs.is_floating_point():
            obs = obs.float()
        scale = torch.rsqrt(self.var + 1e-8).to(obs.dtype)
        return ((obs - self.mean.to(obs.dtype)) * scale).clamp(-self.clip, self.clip)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`forward` (unclamped): ``x sqrt(var + 1e-8) + mean`` ``[*B, *E]``, a
        critic's standardised prediction back in reward units (``net.value_norm``)."""
        return x * torch.sqrt(self.var + 1e-8).to(x.dtype) + self.mean.to(x.dtype)

    @torch.no_grad()
    def update(self, count: torch.Tensor, total: torch.Tensor, total_sq: torch.Tensor) -> bool:
        """Merge a batch given by its size, sum ``[F]`` and sum of squares ``[F]`` (float64; summed over
        every actor or rank by the caller: :func:`batch_moments` gives them as one vector). Returns
        ``False``, merging nothing, for a batch with a NaN or inf: merged, it would poison the
        statistics for the rest of the run (and every checkpoint)."""
        count = torch.as_tensor(count, dtype=torch.float64)
        if not (torch.isfinite(total).all() and torch.isfinite(total_sq).all()):
            return False
        if float(count) <= 0:
            return True
        mean = total / count
        var = (total_sq / count - mean.square()).clamp_min(0.0)
        shape = self.mean.shape
        n, m, v = merge_moments(self.count.double(), self.mean.double(), self.var.double(), count, *(
            t.reshape(shape) for t in (mean, var)))  # fmt: skip
        self.count.copy_(n)
        self.mean.copy_(m)
        self.var.copy_(v)
        return True

    def update_moments(self, moments: torch.Tensor) -> bool:
        """Merge a :func:`batch_moments` vector ``[1 + 2F]`` (or a sum of them); ``False`` if refused."""
        return self.update(moments[0], *moments[1:].to(self.mean.device).chunk(2))

    def update_batch(self, x: torch.Tensor) -> bool:
        """Merge observations ``[*B, *E]``; ``False`` if refused (a NaN or inf among them)."""
        return self.update_moments(batch_moments(x, self.mean.dim()))


def find_obs_norm(model: nn.Module) -> ObsNorm | None:
    """The model's :class:`ObsNorm` (its ``obs_norm`` attribute), or None."""
    norm = getattr(model, "obs_norm", None)
    return norm if isinstance(norm, ObsNorm) else None


def fold_observations(norm: ObsNorm, obs: torch.Tensor, lock=None) -> bool:
    """Merge a trained batch's observations ``[*B, F]`` into ``norm``, under ``lock`` when another
    thread reads the model (SEED's inference takes it around each forward: no batch is served from
    half-merged statistics). The reduction runs outside the lock; inference waits for the copy only.
    ``False`` when the batch held a NaN or inf and nothing was merged."""
    if norm.mean.dim() > 1:  # images: a quarter of the batch is plenty for per-pixel statistics, at
        obs = obs.reshape(-1, *norm.mean.shape)[::4]  # a quarter of the float64 copy (~56 MB at 1,024 frames)
    moments = batch_moments(obs, norm.mean.dim())
    with lock or nullcontext():
        return norm.update_moments(moments)
