"""SEED end to end: one process on the local transport (feed-forward and LSTM cores), torchrun with
3 processes on CartPole to 475 and holding it, and the byte count impala reports for comparison."""

from __future__ import annotations

import pytest

from helpers import assert_held, hold_args, read_metrics, read_summary as read_common_summary

SEED_KEYS = {
    "bytes_per_env_step",
    "inference_batch_fill_mean",
    "inference_latency_ms_mean",
    "inference_latency_ms_p95",
    "inference_compute_ms_mean",
    "inference_batches",
}
ROLES = {"0": "learner", "1": "env_worker", "2": "env_worker"}


def read_summary(run_dir) -> dict:
    return read_common_summary(run_dir, SEED_KEYS)


def check_measured(s: dict) -> None:
    """The figures the issue asks for are there and consistent with each other."""
    assert s["inference_batch_fill_mean"] >= 1.0 and s["inference_batches"] > 0
    # A request waits at least for its own batch's compute (it arrived before the batch started),
    # and a batch holds at least one request: mean latency x mean fill >= mean compute. A latency
    # in the wrong unit or taken from the wrong start fails this; measured here, debug run: 6.0 ms
    # x 2.0 requests against 3.3 ms. The p95 is over the last 10k requests, the mean over all,
    # so no order between them is certain: printed, not asserted.
    latency, compute = s["inference_latency_ms_mean"], s["inference_compute_ms_mean"]
    print(
        f"\ninference: latency {latency} ms mean, {s['inference_latency_ms_p95']} ms p95; "
        f"compute {compute} ms a batch; fill {s['inference_batch_fill_mean']}"
    )
    assert compute > 0 and latency * s["inference_batch_fill_mean"] >= compute, (latency, compute)
    # obs (4 B) + reward (4) + done flags (2) in, action (4) out per env step, plus small headers
    assert 14 <= s["bytes_per_env_step"] < 40
    assert 0 <= s["policy_lag_mean"] < 5


@pytest.mark.timeout(180)
@pytest.mark.parametrize("experiment", ["debug", "debug_lstm"])
def test_world_size_one_learns_the_toy_env(experiment, tmp_path, in_process):
    run = tmp_path / "run"
    assert in_process(["seed", "--experiment", experiment, "--run-dir", str(run)]) == 0
    s = read_summary(run)
    assert s["roles"] == ROLES and s["stop_reason"] == "total_frames"
    assert s["eval_return_mean"] >= 19.0, s  # uniform play scores 10, perfect 20
    check_measured(s)
    rows = read_metrics(run)
    assert any("inference/batch_fill" in r and "learner/bytes_per_env_step" in r for r in rows)
    assert list((run / "checkpoints").glob("ckpt_*.pt"))


@pytest.mark.timeout(180)
def test_impala_reports_bytes_on_the_wire(impala_debug_run):
    # the shared ``impala --experiment debug`` run of conftest.py (exit status 0 checked there)
    s = read_common_summary(impala_debug_run, {"bytes_per_env_step"})
    # a trajectory step carries obs and next obs, action, log-prob, version, reward and flags
    # (~40 B), and every reply carries the parameters of both networks
    assert s["bytes_per_env_step"] > 40


@pytest.mark.timeout(300)
def test_torchrun_cartpole_reaches_475_and_holds_it(tmp_path, jobs):
    """CartPole-v1 without early stop: reaches 475 (10-seed sweep: docs/seed.md) and keeps it to
    the end of the budget, judged by the last policy's greedy evaluation. Floor 325: the lowest
    training mean after 475 was 375.7 over that sweep's 10 seeds (397.2 with 4 processes). 100 s:
    the sweep reached 475 at 33-73 s (median 67 s) with 3 processes, on shared cores. The same
    run is the torchrun test of the roles and the figures (a separate 3-process debug run cost 11 s
    of start-up for nothing more)."""
    run = tmp_path / "run"
    proc = jobs.train(
        [
            "seed",
            "--env",
            "CartPole-v1",
            *hold_args(),
            "--max-time-s",
            "100",
            "--run-dir",
            str(run),
            "--logger",
            "none",
        ],
        nproc=3,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["roles"] == ROLES and s["world_size"] == 3
    check_measured(s)
    assert_held(s, floor=325.0)
