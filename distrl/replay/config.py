"""The settings of one replay shard (:class:`~distrl.replay.server.ReplayServer`); every shard of a
service has the same. A recipe that puts replay shards on ranks gives its ``algo`` config a
``replay`` property returning one (``apex`` does); ``ReplayServiceBuffer.local`` builds its own."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplayConfig:
    """One shard's store, prioritization and rate limit."""

    capacity: int = 100_000  #: transitions the shard keeps (FIFO beyond)
    alpha: float = 0.6  #: priority exponent: P(i) = p_i^alpha / sum_k p_k^alpha
    priority_eps: float = 1e-3  #: p_i = |delta_i| + priority_eps
    min_size: int = 2_000  #: transitions the shard must hold before it serves samples
    samples_per_insert: float = 4.0  #: target sampled/inserted ratio (0: no rate limit)
    spi_tolerance: float = 20_000.0  #: drift from that ratio, in sampled items, before the shard holds one side
    queue_size: int = 8  #: insert messages the shard queues before it answers ``held``
    frame_room: float = 1.05  #: frame-stack envs: frames the shard keeps per transition of capacity, each once
    #: seconds without a word from the learner (any call, its pings) before the shard pings it; it
    #: leaves only when the learner is gone, or silent for max(run.watchdog_s, idle_s) more
    idle_s: float = 60.0

    def __post_init__(self):
        if self.capacity < 1 or self.queue_size < 1:
            raise ValueError(f"replay capacity and queue_size must be >= 1, got {self.capacity} and {self.queue_size}")
        if not 0 <= self.min_size <= self.capacity:
            raise ValueError(f"replay min_size must be in [0, capacity], got {self.min_size}")
        if self.alpha < 0 or self.priority_eps <= 0:
            raise ValueError("replay alpha must be >= 0 and priority_eps > 0")
        if self.frame_room < 1:
            raise ValueError(f"replay frame_room must be >= 1, got {self.frame_room}")
        if self.samples_per_insert < 0:
            raise ValueError("replay samples_per_insert must be >= 0")
        if not self.idle_s > 0:
            raise ValueError(f"replay idle_s must be > 0, got {self.idle_s}")
