"""Cores of their own for the ranks of one machine: the learner on some, every other rank on the rest.

Why: when one rank's computation bounds the whole run (``sf`` on Atari: its learner is one torch
thread busy ~98% of the time), the OS scheduler still moves the rollout workers and the inference
rank onto its core, where each preemption and the caches they evict slow the conv backward: on 2
cores ``sf``'s learner took ~925 us of wall time an agent step among the other ranks against ~800
with a core to itself (docs/atari.md). Sample Factory pins its workers for the same reason
(``set_workers_cpu_affinity``).

Linux only (``os.sched_setaffinity``); elsewhere, or when the machine has no core to spare, nothing
is pinned and the run goes on as before.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence


def split_cores(allowed: Sequence[int], learner_cores: int) -> Optional[tuple[list[int], list[int]]]:
    """``(the learner's cores, every other rank's)`` from the cores a process may use: the first
    ``learner_cores`` of ``allowed`` (sorted) and the rest; ``None`` when there is nothing to
    split (``learner_cores`` 0, or not fewer than the cores there are)."""
    cores = sorted(allowed)
    if learner_cores <= 0 or learner_cores >= len(cores):
        return None
    return cores[:learner_cores], cores[learner_cores:]


def pin_process(cores: Sequence[int]) -> None:
    """Every thread of this process on ``cores`` (threads started later inherit it from their
    creator): ``sched_setaffinity(0)`` alone moves only the calling thread, and the transport's
    threads exist before a role is built."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except (ProcessLookupError, FileNotFoundError):  # a thread that ended meanwhile
            pass


def pin_rank(learner: bool, learner_cores: int) -> Optional[list[int]]:
    """Pin this process as the learner (``learner=True``) or as one of the other ranks, given
    ``learner_cores`` cores for the learner; the cores it now runs on, or ``None`` when nothing
    was pinned (one process, no ``sched_setaffinity``, or too few cores).

    Every rank splits the same set: torchrun's children inherit one affinity mask, and each rank
    calls this once, before it starts threads of its own."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not hasattr(os, "sched_setaffinity"):
        return None
    split = split_cores(os.sched_getaffinity(0), learner_cores)
    if split is None:
        return None
    cores = split[0] if learner else split[1]
    pin_process(cores)
    return cores
