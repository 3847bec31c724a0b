"""Sample Factory end to end: one process on the local transport, torchrun with 4 processes and a
rollout worker killed while it owns slots, a learner killed, and CartPole learning that holds.
Every run must leave no shared-memory file behind (checked after every test by conftest.py)."""

from __future__ import annotations

import os

import pytest

from helpers import assert_held, child_env, hold_args, read_metrics, read_summary as read_common_summary

SF_KEYS = {
    "slots",
    "slots_reclaimed",
    "slot_waits",
    "samples_dropped_for_lag",
    "inference_batch_fill_mean",
    "inference_batch_envs_mean",
    "inference_latency_ms_mean",
    "inference_batches",
    "policy_lag_hist",
    "time_budget",
}
ROLES = {"0": "learner", "1": "inference", "2": "rollout_worker", "3": "rollout_worker"}


def read_summary(run_dir, roles: dict = ROLES) -> dict:
    s = read_common_summary(run_dir, SF_KEYS)
    assert s["roles"] == roles
    assert s["inference_batch_fill_mean"] >= 1.0 and s["inference_batches"] > 0
    assert set(s["time_budget"]) == {"learner", "inference", "rollout_worker"}
    assert sum(s["policy_lag_hist"].values()) > 0
    return s


@pytest.mark.timeout(180)
def test_world_size_one_two_inference_ranks_learn_the_toy_env_within_the_lag_cap(tmp_path, in_process):
    run = tmp_path / "run"
    status = in_process(
        [
            "sf",
            "--experiment",
            "debug",
            "--run-dir",
            str(run),
            "--set",
            "algo.max_policy_lag=1",
            "--set",
            "algo.inference_ranks=2",
        ]
    )
    assert status == 0
    s = read_summary(
        run, {"0": "learner", "1": "inference", "2": "inference", "3": "rollout_worker", "4": "rollout_worker"}
    )
    assert s["stop_reason"] == "total_frames" and s["eval_return_mean"] >= 19.0, s  # uniform 10, perfect 20
    assert s["policy_lag_max"] <= 1  # the cap: nothing older was trained on...
    assert s["samples_dropped_for_lag"] == s["counters"].get("samples_dropped_for_lag", 0)  # ...and drops counted
    rows = read_metrics(run)
    assert any("inference/batch_fill" in r and "rollout_worker/time_env" in r for r in rows)


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(240)
def test_torchrun_four_processes_goes_on_when_a_worker_is_killed_holding_slots(tmp_path, jobs):
    run = tmp_path / "run"
    # rank 3 SIGKILLs itself at its 40th round, while it owns a slot and a spare per group; the
    # learner on a core of its own, the others on the rest (the Atari preset's layout)
    proc = jobs.train(
        ["sf", "--experiment", "debug", "--run-dir", str(run), "--set", "algo.learner_cores=1"],
        nproc=4,
        timeout=180,
        env=child_env(DISTRL_FAULT="kill@3:40"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if len(os.sched_getaffinity(0)) >= 2:
        assert f"[learner] on core(s) [{min(os.sched_getaffinity(0))}]" in proc.stdout
    s = read_summary(run)
    assert s["world_size"] == 4 and s["stop_reason"] == "total_frames"
    assert "3" in s["lost_ranks"] and s["slots_reclaimed"] >= 1, s["lost_ranks"]
    assert s["eval_return_mean"] >= 19.0, s


@pytest.mark.timeout(240)
def test_a_killed_learner_ends_the_job_and_leaves_no_shared_memory(tmp_path, jobs):
    proc = jobs.train(
        ["sf", "--experiment", "debug", "--run-dir", str(tmp_path / "run")],
        nproc=4,
        timeout=180,
        env=child_env(DISTRL_FAULT="kill@0:5"),
    )
    assert proc.returncode != 0
    assert "injecting kill on rank 0" in proc.stdout + proc.stderr


@pytest.mark.timeout(300)
def test_torchrun_cartpole_reaches_475_and_holds_it(tmp_path, jobs):
    """CartPole-v1 without early stop: reaches 475 and keeps it to the end of the budget, judged
    by the last policy's greedy evaluation (docs/sf.md: the 5-seed sweep). Floor 300: the lowest
    training mean after 475 in docs/sf.md's sweeps was 392.4 (right after the crossing; 445.8-475.3
    in the 90 s sweep of 2026-12-03 21:42), 330.8 in one CI run of the full suite (2 shared cores). A
    collapse, what this test is for, falls below 100 (docs/sf.md). 30 s: the sweeps reached 475 at a median
    6.3 s with 4 processes; a collapse comes within seconds of the crossing."""
    run = tmp_path / "run"
    proc = jobs.train(
        ["sf", "--env", "CartPole-v1", *hold_args(), "--max-time-s", "30", "--run-dir", str(run), "--logger", "none"],
        nproc=4,
        timeout=220,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_held(read_summary(run), floor=300.0)
