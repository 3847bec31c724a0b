"""Prioritized sampling in pure torch: a vectorized sum tree and a TorchRL ``Sampler`` on it.

TorchRL's ``PrioritizedSampler`` keeps its trees in torchrl's C++ extension, which does not load
with torch 2.13.0+cpu (an undefined symbol at import, every torchrl from 0.10 to 0.14.1).
:class:`SumTreeSampler` is a drop-in ``Sampler`` for any TorchRL ``ReplayBuffer`` that needs no
extension: ``P(i) = p_i^alpha / sum_k p_k^alpha`` with ``p_i = |delta_i| + eps``, importance weights
``(N P(i))^-beta`` normalised by their maximum (:mod:`distrl.replay.weights`).

Why a K-ary tree: every operation is a handful of whole-batch torch ops per level, and on CPU the
cost of an op is mostly its fixed overhead. A binary tree over 2^20 items needs 20 levels; with a
fan-out of 16 it needs 5, each a ``[B, 16]`` gather, cumsum and ``searchsorted``. Measured on
one core (``experiments/bench_sampler.py``): binary about 0.42M, fan-out 16 about 0.9M
samples+updates per second. Sums are float64 and recomputed from the children on every write
(never updated by differences), so they do not drift over a long run.
"""

from __future__ import annotations

from typing import Any

import torch
from torchrl.data.replay_buffers.samplers import PrioritizedSampler, Sampler

from distrl.data import keys
from distrl.replay.weights import importance_weights, priority_weights

_BELOW_ONE = 1.0 - 2.0**-50  # x * this < x for every positive float64 x: "just below the row's total"


class SumTree:
    """Sums and minima over ``capacity`` non-negative leaf values, in a tree of fan-out ``K``.

    ``levels[0]`` are the leaves (padded to a multiple of ``K``), ``levels[-1]`` the root ``[1]``;
    node ``j`` of level ``l`` covers children ``j*K .. j*K+K-1`` of level ``l-1``. Empty leaves
    hold 0 in the sum tree and +inf in the min tree.
    """

    def __init__(self, capacity: int, fanout: int = 16, dtype: torch.dtype = torch.float64):
        if capacity < 1 or fanout < 2:
            raise ValueError(f"capacity must be >= 1 and fanout >= 2, got {capacity} and {fanout}")
        self.capacity, self.K, self.dtype = capacity, fanout, dtype
        sizes, n = [], capacity
        while True:
            sizes.append(-(-n // fanout) * fanout)  # padded to whole rows of K
            n = -(-n // fanout)
            if n == 1:
                break
        self.sums = [torch.zeros(s, dtype=dtype) for s in sizes] + [torch.zeros(1, dtype=dtype)]
        self.mins = [torch.full((s,), float("inf"), dtype=dtype) for s in sizes] + [
            torch.full((1,), float("inf"), dtype=dtype)
        ]

    @property
    def total(self) -> torch.Tensor:
        """Sum of every leaf (a 0-dim tensor)."""
        return self.sums[-1][0]

    @property
    def min(self) -> torch.Tensor:
        """Smallest leaf set so far (+inf when empty; 0-dim)."""
        return self.mins[-1][0]

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        return self.sums[0].index_select(0, index.reshape(-1))

    def set(self, index: torch.Tensor, value: torch.Tensor) -> None:
        """Leaves ``index [B]`` take ``value [B]`` (> 0: the min tree takes them as they are);
        ancestors are recomputed from their children.

        Repeated indices are allowed (the last write wins, as with ``tensor[index] = value``); a
        parent written twice gets the same sum both times, because its children are final by then.
        """
        # index_select / index_copy_ rather than ``t[i]``: the same work, less Python dispatch,
        # which is most of the cost at these sizes.
        i = index.reshape(-1).long()
        value = value.reshape(-1).to(self.dtype)
        self.sums[0].index_copy_(0, i, value)
        self.mins[0].index_copy_(0, i, value)
        for lvl in range(1, len(self.sums)):
            i = torch.div(i, self.K, rounding_mode="floor")
            self.sums[lvl].index_copy_(0, i, self.sums[lvl - 1].view(-1, self.K).index_select(0, i).sum(1))
            self.mins[lvl].index_copy_(0, i, self.mins[lvl - 1].view(-1, self.K).index_select(0, i).amin(1))

    def rebuild(self) -> None:
        """Recompute every inner node from the leaves (after loading them)."""
        self.mins[0] = torch.where(self.sums[0] > 0, self.sums[0], torch.full_like(self.sums[0], float("inf")))
        for lvl in range(1, len(self.sums)):
            n = self.sums[lvl].numel()
            rows_s, rows_m = self.sums[lvl - 1].view(-1, self.K), self.mins[lvl - 1].view(-1, self.K)
            self.sums[lvl].zero_()
            self.mins[lvl].fill_(float("inf"))
            self.sums[lvl][: rows_s.shape[0]] = rows_s.sum(1)[:n]
            self.mins[lvl][: rows_m.shape[0]] = rows_m.amin(1)[:n]

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """Leaf ``i`` with ``prefix(i) <= mass < prefix(i) + leaf(i)`` for each ``mass [B]`` in ``[0, total)``.

        Float rounding between a parent's stored sum and its children's cumsum is absorbed by
        clamping the mass below each row's total, so a zero leaf (empty or padding) is never chosen.
        """
        mass = mass.reshape(-1, 1).to(self.dtype)
        i = torch.zeros(mass.shape[0], dtype=torch.long)
        for lvl in range(len(self.sums) - 2, -1, -1):
            rows = self.sums[lvl].view(-1, self.K).index_select(0, i)  # [B, K]
            cum = rows.cumsum(1)
            mass = torch.minimum(mass, cum[:, -1:] * _BELOW_ONE)
            j = torch.searchsorted(cum, mass, right=True)  # first child whose prefix exceeds the mass
            mass = mass - (cum.gather(1, j) - rows.gather(1, j))
            i = i * self.K + j.squeeze(1)
        return i


class SumTreeSampler(Sampler):
    """Proportional prioritized sampling for a TorchRL ``ReplayBuffer``, without the C++ extension.

    New items get the largest priority seen so far (so each is likely sampled once before its TD
    error is known); ``update_priority(index, |delta|)`` sets ``p = |delta| + eps``. ``sample``
    returns ``(index [B], {"priority_weight": w [B]})`` with ``w`` the normalised importance weights
    at the current ``beta`` (set it as it is annealed: ``sampler.beta = annealed_beta(...)``).

    In a ``TensorDictReplayBuffer(priority_key=...)`` it takes part in TorchRL's priority flow as
    ``PrioritizedSampler`` does: ``extend`` stores the batch's priorities, ``update_tensordict_priority``
    reads a sampled batch's ``index`` and priority key (several priorities per item are reduced by
    ``reduction``, as TorchRL's ``_reduce`` does).

    Args:
        max_capacity: the storage's capacity (leaves of the tree).
        alpha: priority exponent (0 is uniform); beta: importance-weight exponent.
        eps: added to ``|delta|`` so no item's probability is 0. fanout: the tree's ``K``.
        reduction: how ``[B, *]`` priorities become ``[B]``: max, min, mean or median.
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        fanout: int = 16,
        reduction: str = "max",
    ):
        if alpha < 0 or not 0 <= beta <= 1 or eps <= 0:
            raise ValueError(f"need alpha >= 0, 0 <= beta <= 1, eps > 0; got {alpha}, {beta}, {eps}")
        if reduction not in ("max", "min", "mean", "median"):
            raise ValueError(f"reduction must be max, min, mean or median, got {reduction!r}")
        self.alpha, self.beta, self.eps, self.fanout, self.reduction = alpha, beta, eps, fanout, reduction
        self.tree = SumTree(max_capacity, fanout)
        self.max_priority = 1.0  # raw |delta|; what a new item gets
        self.nonfinite = 0  # NaN/inf priorities refused (their items kept their old ones)

    # ---- what the replay buffer calls ------------------------------------------------------------
    def sample(self, storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError("cannot sample from an empty replay")
        mass = torch.rand(batch_size, dtype=torch.float64, generator=self._rng).mul_(self.tree.total)
        index = self.tree.find(mass)
        # P(i) / min_j P(j) is leaf(i) / min leaf: the total cancels, two ops fewer per batch
        weight = importance_weights(self.tree[index], n, self.tree.min, self.beta)
        return index, {keys.PRIORITY_WEIGHT: weight.float()}

    def extend(self, index: torch.Tensor) -> None:
        index = torch.as_tensor(index).reshape(-1)
        self.tree.set(index, torch.full(index.shape, self._weight(self.max_priority), dtype=torch.float64))

    def add(self, index: int) -> None:
        self.extend(torch.as_tensor([index]))

    def update_priority(self, index, priority, *, storage=None) -> None:
        """Items ``index [B]`` take raw priorities ``priority [B]`` (``|delta|``, or one number); an
        item whose priority is NaN or inf keeps its old one (counted in ``nonfinite``): one such leaf
        would make the tree's total NaN, every later sample broken and the tree checkpointed so."""
        index = torch.as_tensor(index).reshape(-1)
        if index.numel() == 0:
            return
        priority = torch.as_tensor(priority, dtype=torch.float64).reshape(-1)
        if priority.numel() == 1:
            priority = priority.expand(index.shape)
        finite = torch.isfinite(priority)
        if not finite.all():
            self.nonfinite += int((~finite).sum())
            index, priority = index[finite], priority[finite]
            if index.numel() == 0:
                return
        weight = priority_weights(priority, self.alpha, self.eps)
        self.max_priority = max(self.max_priority, abs(priority).max().item())
        self.tree.set(index, weight)

    def mark_update(self, index, *, storage=None) -> None:
        self.update_priority(index, self.max_priority)

    @property
    def default_priority(self) -> float:
        return self.max_priority

    def _weight(self, priority: float) -> float:
        return (abs(priority) + self.eps) ** self.alpha

    def probabilities(self, index: torch.Tensor) -> torch.Tensor:
        """``P(i)`` of items ``index [B]`` (float64)."""
        return self.tree[torch.as_tensor(index)] / self.tree.total

    # ---- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "eps": self.eps,
            "max_priority": self.max_priority,
            "leaves": self.tree.sums[0].clone(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.alpha, self.beta, self.eps = state_dict["alpha"], state_dict["beta"], state_dict["eps"]
        self.max_priority = state_dict["max_priority"]
        self.tree.sums[0].copy_(state_dict["leaves"])
        self.tree.rebuild()

    def _empty(self) -> None:
        self.tree = SumTree(self.tree.capacity, self.fanout)
        self.max_priority = 1.0

    def dumps(self, path) -> None:
        torch.save(self.state_dict(), path)

    def loads(self, path) -> None:
        self.load_state_dict(torch.load(path, weights_only=True))

    def __repr__(self) -> str:
        return f"SumTreeSampler(capacity={self.tree.capacity}, alpha={self.alpha}, beta={self.beta}, eps={self.eps})"


# TorchRL's buffers route priorities only to a sampler that is a ``PrioritizedSampler``
# (``TensorDictReplayBuffer.update_tensordict_priority`` returns silently otherwise, and
# ``ReplayBuffer`` skips default priorities for data already in a storage). Registered as a virtual
# subclass it takes that path and inherits nothing: that class's methods use the C++ trees.
PrioritizedSampler.register(SumTreeSampler)
