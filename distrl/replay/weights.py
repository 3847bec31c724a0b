"""Prioritized replay's weights (Schaul et al., 2016), as the sampler and a learner use them.

Items are sampled with probability ``P(i) = p_i^alpha / sum_k p_k^alpha`` over priorities
``p_i = |delta_i| + eps`` (:func:`priority_weights`, what the sum tree stores), and each sampled
item's update is scaled by the importance weight ``w_i = (N P(i))^-beta / max_j w_j``
(:func:`importance_weights`) with ``beta`` annealed to 1 over training (:func:`annealed_beta`):
the bias of prioritized sampling matters most at the end, when the policy should converge.
``tests/test_apex_math.py`` checks them against the paper's formulas.
"""

from __future__ import annotations

import torch


def priority_weights(priority: torch.Tensor, alpha: float, eps: float) -> torch.Tensor:
    """Sampling weights ``(|delta| + eps)^alpha`` of raw priorities ``|delta|`` (any shape)."""
    return (priority.abs() + eps).pow(alpha)


def importance_weights(prob: torch.Tensor, size: int, min_prob: torch.Tensor | float, beta: float) -> torch.Tensor:
    """``w_i = (N P(i))^-beta / max_j (N P(j))^-beta = (P(i) / min_j P(j))^-beta``.

    Only the ratio ``P(i) / min_j P(j)`` enters, so unnormalised weights ``p_i^alpha`` and their
    minimum give the same result (the sampler passes those: two ops fewer per batch).

    Args:
        prob: ``[B]`` sampling probabilities ``P(i)`` of the sampled items.
        size: ``N``, the items in the buffer (every shard together).
        min_prob: the smallest ``P(j)`` over the buffer: the normaliser makes the largest possible
            weight 1, so weights only ever scale updates down (Schaul et al., section 3.4).

    Returns:
        ``w [B]``.
    """
    del size  # cancels between w_i and the normaliser; kept in the signature to mirror the formula
    return (prob / min_prob).pow(-beta)


def annealed_beta(beta0: float, step: int, steps: int) -> float:
    """``beta`` grown linearly from ``beta0`` at step 0 to 1 at ``steps`` and held there."""
    if steps <= 0:
        return 1.0
    return beta0 + (1.0 - beta0) * min(1.0, step / steps)


def shard_weights(leaf: torch.Tensor, min_leaf: float, beta: float) -> torch.Tensor:
    """Importance weights of items sampled across shards.

    With shards drawn in proportion to their totals ``S_r``, item ``i`` of shard ``r`` comes out with
    ``P(i) = (S_r / S) (leaf_i / S_r) = leaf_i / S``: one buffer's probability. So
    ``w_i = (P(i) / min_j P(j))^-beta = (leaf_i / min_j leaf_j)^-beta`` with the minimum over all shards.

    Args:
        leaf: ``[B]`` ``p_i^alpha`` of the sampled items; min_leaf: the smallest over every shard.
    """
    return (leaf.double() / min_leaf).pow(-beta).float()
