"""Bytes on the wire: what each recipe ships between ranks, per environment step.

Counted as the tensor payload of every message a learner receives and every reply it sends
(``numel * itemsize`` of each leaf). Serialisation headers are left out: they are a constant per
message, and recipes differ in the payloads, which is what the figure is for (``impala`` ships
trajectories one way and parameters the other, ``seed`` observations one way and actions back).
"""

from __future__ import annotations

import threading
from typing import Optional

from tensordict import TensorDictBase


def payload_nbytes(td: Optional[TensorDictBase]) -> int:
    """Total bytes of the tensors in ``td`` (nested included); 0 for ``None``."""
    if td is None:
        return 0
    return sum(t.numel() * t.element_size() for t in td.values(include_nested=True, leaves_only=True))


class WireMeter:
    """Thread-safe running totals of bytes and of the env frames those bytes carried.

    Transport handlers run on several threads at once, so ``+=`` on a plain attribute could
    lose counts; one lock around two integer additions costs well under a microsecond.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes = 0
        self.frames = 0

    def add(self, nbytes: int, frames: int) -> None:
        with self._lock:
            self.bytes += int(nbytes)
            self.frames += int(frames)

    @property
    def bytes_per_env_step(self) -> float:
        """Bytes per env frame that crossed the wire so far (0 before any frame)."""
        return self.bytes / self.frames if self.frames else 0.0
