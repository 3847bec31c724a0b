"""Replay storage for off-policy learners: what a replay role keeps, checks and checkpoints.

The storage and the first-in-first-out eviction are TorchRL's: a ``TensorDictReplayBuffer`` over a
``LazyTensorStorage`` whose ``RoundRobinWriter`` overwrites the oldest items once the buffer is
full, so its size stays at capacity however much is inserted. distrl adds what a long distributed
run needs around it, which TorchRL leaves to the caller:

* every insert is checked against the layout of the first one (keys, per-item shapes, dtypes); a
  malformed batch from a buggy or corrupted actor is rejected and counted, never stored;
* the contents, the writer's cursor and the counters go into the learner's checkpoint
  (``LearnerSession.extra_state``) and come back on resume, so a restarted run samples from the
  same data it would have.

Prioritized sampling: give it a :class:`distrl.replay.sum_tree.SumTreeSampler` (TorchRL's own
``PrioritizedSampler`` needs a C++ extension that does not load with torch 2.13.0+cpu). The writer
then stamps every slot with a generation, so a priority update for an item that FIFO eviction has
since replaced is dropped instead of landing on its successor.

:class:`SamplesPerInsertLimiter` is the rate limiter a replay role puts in front of a store.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from tensordict import TensorDictBase
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.data.replay_buffers import RandomSampler, RoundRobinWriter
from torchrl.data.replay_buffers.samplers import Sampler

Layout = dict[Any, tuple[tuple[int, ...], torch.dtype]]


def all_finite(parts: tuple) -> bool:
    """Whether every floating-point tensor among ``parts`` (TensorDicts, tensors, ``None``) is
    finite: an insert with a NaN reward (in its n-step return) or priority is poisoned data."""
    for part in parts:
        if isinstance(part, TensorDictBase):
            tensors = part.values(include_nested=True, leaves_only=True)
        else:
            tensors = (part,) if isinstance(part, torch.Tensor) else ()
        if any(t.is_floating_point() and not torch.isfinite(t).all() for t in tensors):
            return False
    return True


def layout_of(batch: TensorDictBase) -> Layout:
    """``{key: (per-item shape, dtype)}`` of a ``[N, ...]`` batch's leaves."""
    return {k: (tuple(v.shape[1:]), v.dtype) for k, v in batch.items(include_nested=True, leaves_only=True)}


class ReplayStore:
    """A bounded FIFO replay of ``[N]`` TensorDict items (transitions or whole trajectories).

    Args:
        capacity: items kept; the oldest are overwritten beyond it.
        batch_size: items returned by :meth:`sample`; ``None``: each call says how many.
        device: where the storage lives (the learner's device: samples need no copy).
        sampler: how items are drawn; uniform by default, or a prioritized ``SumTreeSampler``.
        generator: what the sampler draws from (``None``: torch's global generator). Handed to
            TorchRL's buffer, which sets it on the sampler when it initialises (a generator set on the
            sampler beforehand is replaced) and keeps its state in :meth:`state_dict`.
    """

    def __init__(
        self,
        capacity: int,
        batch_size: Optional[int],
        device: torch.device | str = "cpu",
        sampler: Optional[Sampler] = None,
        generator: Optional[torch.Generator] = None,
    ):
        if capacity < 1 or (batch_size is not None and batch_size < 1):
            raise ValueError(f"capacity and batch_size must be >= 1, got {capacity} and {batch_size}")
        self.capacity = capacity
        self.sampler = sampler
        self.writer = RoundRobinWriter(track_generations=sampler is not None)
        self.buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(capacity, device=device),
            batch_size=batch_size,
            sampler=sampler or RandomSampler(),
            writer=self.writer,
            generator=generator,
        )
        self.layout: Layout | None = None  # fixed by the first accepted insert
        self.inserted = 0  # items accepted over the run (evicted ones included)
        self.rejected = 0  # batches refused for a wrong layout

    def __len__(self) -> int:
        return len(self.buffer)

    def extend(self, batch: TensorDictBase, priority: Optional[torch.Tensor] = None) -> bool:
        """Append ``batch`` ``[N, ...]`` (with raw priorities ``priority [N]`` when prioritized);
        returns ``False`` (and counts it) if its layout is wrong or a priority is not finite."""
        layout = layout_of(batch) if batch.batch_dims == 1 else None
        if layout is None or (self.layout is not None and layout != self.layout):
            self.rejected += 1
            return False
        if priority is not None and (
            self.sampler is None or priority.shape != batch.shape or not torch.isfinite(priority).all()
        ):
            self.rejected += 1  # a NaN priority would make the sum tree's total NaN
            return False
        self.layout = layout
        index = self.buffer.extend(batch)
        if priority is not None:
            self.sampler.update_priority(index, priority)
        self.inserted += batch.shape[0]
        return True

    def update_priority(self, index: torch.Tensor, generation: torch.Tensor, priority: torch.Tensor) -> int:
        """New raw priorities ``[B]`` for sampled items ``index [B]``; an item whose slot has been
        rewritten since it was sampled (its ``generation`` moved on) keeps its new occupant's
        priority. Returns how many were applied."""
        keep = self.writer.generations_of(index) == generation
        self.sampler.update_priority(index[keep], priority[keep])
        return int(keep.sum())

    def sample(self, batch_size: Optional[int] = None) -> TensorDictBase:
        """``[batch_size]`` items drawn by the sampler (uniformly by default); a prioritized store
        adds TorchRL's ``index``, ``index_generation`` and ``priority_weight`` entries."""
        if len(self) == 0:
            raise RuntimeError("sample() on an empty replay")
        return self.buffer.sample(batch_size)

    def nbytes(self) -> int:
        """Bytes of every tensor the store holds: the stored items (at capacity once the first insert
        has allocated them), the writer's slot generations and a prioritized sampler's tree."""
        storage = self.buffer.storage
        items = storage._storage if storage.initialized else None
        total = sum(t.numel() * t.element_size() for t in items.values(True, True)) if items is not None else 0
        generation = getattr(self.writer, "_generation", None)
        total += generation.numel() * generation.element_size() if isinstance(generation, torch.Tensor) else 0
        tree = getattr(self.sampler, "tree", None)
        if tree is not None:
            total += sum(t.numel() * t.element_size() for t in tree.sums + tree.mins)
        return total

    def state_dict(self) -> dict:
        """Contents, write cursor and counters: what a checkpoint needs to resume the replay exactly."""
        return {
            "buffer": self.buffer.state_dict(),
            "layout": self.layout,
            "inserted": self.inserted,
            "rejected": self.rejected,
        }

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.layout, self.inserted, self.rejected = state["layout"], state["inserted"], state["rejected"]


class SamplesPerInsertLimiter:
    """Keeps sampling and inserting near ``samples_per_insert`` sampled items per inserted item
    (Reverb's ``SampleToInsertRatio``).

    The error ``e = samples - spi * (inserts - min_size)`` counts how many samples the learner is
    ahead of the target ratio. A sample of ``n`` is allowed while ``e + n <= tolerance`` (and once
    ``min_size`` items went in); an insert of ``n`` while ``e - spi * n >= -tolerance``. Both are
    blocked at once only if ``2 * tolerance < n_sample + spi * n_insert``, so a tolerance of at
    least that never deadlocks (the recipe checks it). ``samples_per_insert = 0`` turns it off:
    only ``min_size`` applies. Not thread-safe: the replay role calls it under its lock.
    """

    def __init__(self, samples_per_insert: float, tolerance: float, min_size: int):
        if samples_per_insert < 0 or tolerance < 0 or min_size < 0:
            raise ValueError("samples_per_insert, tolerance and min_size must be >= 0")
        self.spi, self.tolerance, self.min_size = samples_per_insert, tolerance, min_size
        self.inserts = 0  # items let in
        self.samples = 0  # items handed out

    @property
    def error(self) -> float:
        return self.samples - self.spi * (self.inserts - self.min_size)

    def can_insert(self, n: int) -> bool:
        return self.spi == 0 or self.inserts < self.min_size or self.error - self.spi * n >= -self.tolerance

    def can_sample(self, n: int) -> bool:
        return self.inserts >= self.min_size and (self.spi == 0 or self.error + n <= self.tolerance)

    def state_dict(self) -> dict:
        return {"inserts": self.inserts, "samples": self.samples}

    def load_state_dict(self, state: dict) -> None:
        self.inserts, self.samples = state["inserts"], state["samples"]
