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

Prioritized sampling (Ape-X) is not here: with torch 2.13.0 TorchRL 0.14.1's C++ extension does
not load, so its ``PrioritizedSampler`` raises; the Ape-X replay service brings its own.
"""
from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

Layout = dict[Any, tuple[tuple[int, ...], torch.dtype]]


def layout_of(batch: TensorDictBase) -> Layout:
    """``{key: (per-item shape, dtype)}`` of a ``[N, ...]`` batch's leaves."""
    return {k: (tuple(v.shape[1:]), v.dtype) for k, v in batch.items(include_nested=True, leaves_only=True)}


class ReplayStore:
    """A bounded FIFO replay of ``[N]`` TensorDict items (transitions or whole trajectories).

    Args:
        capacity: items kept; the oldest are overwritten beyond it.
        batch_size: items returned by :meth:`sample`.
        device: where the storage lives (the learner's device: samples need no copy).
    """

    def __init__(self, capacity: int, batch_size: int, device: torch.device | str = "cpu"):
        if capacity < 1 or batch_size < 1:
            raise ValueError(f"capacity and batch_size must be >= 1, got {capacity} and {batch_size}")
        self.capacity = capacity
        self.buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity, device=device), batch_size=batch_size)
        self.layout: Layout | None = None  # fixed by the first accepted insert
        self.inserted = 0  # items accepted over the run (evicted ones included)
        self.rejected = 0  # batches refused for a wrong layout

    def __len__(self) -> int:
        return len(self.buffer)

    def extend(self, batch: TensorDictBase) -> bool:
        """Append ``batch`` ``[N, ...]``; returns ``False`` (and counts it) if its layout is wrong."""
        layout = layout_of(batch) if batch.batch_dims == 1 else None
        if layout is None or (self.layout is not None and layout != self.layout):
            self.rejected += 1
            return False
        self.layout = layout
        self.buffer.extend(batch)
        self.inserted += batch.shape[0]
        return True

    def sample(self) -> TensorDictBase:
        """``[batch_size]`` items drawn uniformly from what is stored."""
        if len(self) == 0:
            raise RuntimeError("sample() on an empty replay")
        return self.buffer.sample()

    def state_dict(self) -> dict:
        """Contents, write cursor and counters: what a checkpoint needs to resume the replay exactly."""
        return {"buffer": self.buffer.state_dict(), "layout": self.layout,
                "inserted": self.inserted, "rejected": self.rejected}

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.layout, self.inserted, self.rejected = state["layout"], state["inserted"], state["rejected"]
