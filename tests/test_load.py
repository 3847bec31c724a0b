"""Load (docs/reliability.md, path 8): ``impala``, ``apex`` and ``sf`` at 32 processes on one
machine, oversubscribed on purpose, run to their end: exit 0, no rank falsely declared lost, the
lag within its bound, no process or shared-memory file left (the ``jobs`` fixture checks both).

Each run holds every core for ~3.5 min (start-up alone is ~70 s at 32 processes on 2 cores), so
the suite skips these (the ``long`` tier); run them with ``DISTRL_LOAD=1 python -m pytest tests/test_load.py -s``
(``DISTRL_LOAD_NPROC=N`` for another width). The figures of 2026-12-04 are in the fault table."""

from __future__ import annotations

import os

import pytest

from distrl.recipes.apex.recipe import default as apex_default
from distrl.recipes.sf.recipe import default as sf_default
from helpers import read_summary

NPROC = int(os.environ.get("DISTRL_LOAD_NPROC", "32"))
pytestmark = pytest.mark.long  # the long tier (DISTRL_LOAD=1): 32 processes, ~3.5 min of every core each


@pytest.mark.timeout(600)
@pytest.mark.parametrize("recipe", ["impala", "apex", "sf"])
def test_32_processes_run_to_their_end(recipe, tmp_path, jobs):
    run = tmp_path / "run"
    done = jobs.train(
        [recipe, "--run-dir", run, "--max-time-s", "90", "--set", "run.early_stop=false"], nproc=NPROC, timeout=540
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    s = read_summary(run)
    print(
        f"\n{recipe} at {NPROC} processes: {s['fps']:,.0f} fps, lag mean {s['policy_lag_mean']:.1f} "
        f"max {s['policy_lag_max']}, lost {s['lost_ranks']}, eval {s['eval_return_mean']}"
    )
    assert s["stop_reason"] == "max_time" and s["world_size"] == NPROC, s
    assert s["lost_ranks"] == {} and "lost rank" not in out, out[-4000:]  # no false liveness loss
    assert s["learner_updates"] > 0
    if recipe == "sf":  # rows older than the bound are dropped and counted, never trained on
        assert s["policy_lag_max"] <= sf_default().algo.max_policy_lag, s
    if recipe == "apex":
        # the shard's capacity: FIFO eviction, memory bounded
        assert 0 < s["replay_size"] <= apex_default().algo.capacity, s
