"""Ape-X end to end: one process on the local transport, and torchrun with 4 processes (learner,
replay shard, 2 actors)."""

from __future__ import annotations

import pytest

from helpers import read_summary

APEX_KEYS = {"replay_sampled", "replay_size", "learner_wait_sample_s", "learner_update_s"}


@pytest.mark.timeout(180)
def test_world_size_one_learns_the_toy_env(tmp_path, in_process):
    run = tmp_path / "run"
    assert in_process(["apex", "--experiment", "debug", "--run-dir", str(run)]) == 0
    s = read_summary(run, APEX_KEYS)
    assert s["roles"] == {"0": "learner", "1": "replay", "2": "actor", "3": "actor"}
    assert s["stop_reason"] == "total_frames" and s["learner_updates"] > 100
    assert s["eval_return_mean"] >= 19.0  # uniform play scores 10, perfect 20
    assert s["replay_sampled"] >= 64 * s["learner_updates"] and s["policy_lag_max"] >= s["policy_lag_mean"] >= 0
    assert list((run / "checkpoints").glob("ckpt_*.pt"))


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(240)
def test_torchrun_four_processes_two_actors_one_shard(tmp_path, jobs):
    run = tmp_path / "run"
    proc = jobs.train(
        ["apex", "--experiment", "debug", "--run-dir", str(run), "--logger", "csv", "--set", "run.log_interval_s=1"],
        nproc=4,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run, APEX_KEYS)
    assert s["roles"] == {"0": "learner", "1": "replay", "2": "actor", "3": "actor"}
    assert s["eval_return_mean"] >= 19.0 and s["replay_size"] > 0
    rows = (run / "metrics.jsonl").read_text()
    for metric in ("replay/inserts_per_s", "replay/samples_per_insert", "replay/priority_p90", "actor/return_rung1"):
        assert metric in rows, metric
