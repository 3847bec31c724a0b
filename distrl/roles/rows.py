"""Training rows that arrive in chunks of any width and leave in batches of one fixed width.

SEED's chunks are as wide as an env group's request and Sample Factory's as wide as a slot; the
learner trains on ``algo.batch_size`` rows at a time. Rows left over wait for the next batch, so no
row is trained on twice or skipped, and they leave oldest first.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict


class RowQueue:
    """Rows ``[N, ...]`` (a TensorDict's first dim), appended in chunks, taken ``n`` at a time."""

    def __init__(self):
        self._chunks: list[TensorDict] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, chunk: TensorDict) -> None:
        """Append the rows of ``chunk`` (``[n, ...]``; an empty chunk adds nothing)."""
        if chunk.shape[0]:
            self._chunks.append(chunk)
            self._count += chunk.shape[0]

    def take(self, n: int) -> TensorDict:
        """The oldest ``n`` rows (all of them if fewer are held); the rest stay for the next take."""
        rows = torch.cat(self._chunks, dim=0) if len(self._chunks) > 1 else self._chunks[0]
        batch, rest = rows[:n], rows[n:]
        self._chunks = [rest] if rest.shape[0] else []
        self._count = rest.shape[0]
        return batch
