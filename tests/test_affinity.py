"""Cores of their own (distrl/runtime/affinity.py): the split, every thread of a process pinned (this one,
put back on every core after), nothing pinned in one process, and the option checked."""

from __future__ import annotations

import os
import threading

import pytest

from distrl.runtime.affinity import pin_process, pin_rank, split_cores
from distrl.recipes.sf.recipe import SFConfig, atari


def test_the_learner_takes_the_first_cores_and_every_other_rank_the_rest():
    assert split_cores({3, 1, 2, 0}, 1) == ([0], [1, 2, 3])
    assert split_cores([4, 6, 5], 2) == ([4, 5], [6])
    assert split_cores([0, 1], 0) is None  # not asked
    assert split_cores([0, 1], 2) is None and split_cores([0], 1) is None  # no core left for the others


def thread_masks() -> dict[int, set[int]]:
    """Every live thread of this process -> its cores (a thread may end while this looks)."""
    out = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            out[tid] = os.sched_getaffinity(tid)
        except ProcessLookupError:
            pass
    return out


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs Linux and 2 cores"
)
def test_every_thread_of_the_process_is_pinned_and_new_threads_inherit_it(monkeypatch):
    everything, stop = os.sched_getaffinity(0), threading.Event()
    first = min(everything)
    before = threading.Thread(target=stop.wait)  # a transport thread, say
    before.start()
    try:
        monkeypatch.setenv("WORLD_SIZE", "4")
        assert pin_rank(True, 1) == [first]
        after = threading.Thread(target=stop.wait)  # an env's thread pool, say
        after.start()
        masks = thread_masks()
        assert len(masks) >= 3 and all(m == {first} for m in masks.values()), masks
    finally:
        pin_process(sorted(everything))  # the rest of the suite runs on every core again
        stop.set()
    assert all(m == everything for m in thread_masks().values())


def test_nothing_is_pinned_in_one_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    assert pin_rank(True, 1) is None
    if before is not None:
        assert os.sched_getaffinity(0) == before


def test_the_atari_preset_gives_the_learner_a_core_and_a_negative_count_is_refused():
    assert atari().algo.learner_cores == 1 and SFConfig().learner_cores == 0
    with pytest.raises(ValueError, match="learner_cores"):
        SFConfig(learner_cores=-1)
