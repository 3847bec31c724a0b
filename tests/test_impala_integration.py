"""IMPALA end to end: one process on the local transport, and torchrun with 3 processes."""

from __future__ import annotations

import pytest

from helpers import assert_held, hold_args, read_metrics, read_summary


@pytest.mark.timeout(180)
def test_world_size_one_learns_the_toy_env(impala_debug_run):
    """``impala --experiment debug`` in one process: the shared run of conftest.py (the same command,
    exit status 0 checked there), not a run of its own."""
    run = impala_debug_run
    s = read_summary(run)
    assert s["roles"] == {"0": "learner", "1": "actor", "2": "actor"} and s["world_size"] == 3
    assert s["stop_reason"] == "total_frames" and s["env_frames"] >= 20_000
    assert s["eval_return_mean"] >= 19.0  # uniform play scores 10, perfect 20
    assert s["learner_updates"] > 0 and s["policy_lag_max"] >= s["policy_lag_mean"] >= 0
    assert (run / "config.json").exists() and (run / "metrics.jsonl").exists()
    assert list((run / "checkpoints").glob("ckpt_*.pt"))
    assert "[impala] frames" in (run.parent / "stdout").read_text()  # progress line


@pytest.mark.timeout(240)
def test_torchrun_three_processes_with_wandb_offline(tmp_path, jobs):
    run = tmp_path / "run"
    proc = jobs.train(
        ["impala", "--experiment", "debug", "--run-dir", str(run), "--logger", "wandb"], nproc=3, timeout=180
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["roles"] == {"0": "learner", "1": "actor", "2": "actor"}
    assert s["eval_return_mean"] >= 19.0
    assert list((run / "wandb").glob("offline-run-*")), "no offline W&B run written"
    assert (run / "curves.png").exists()  # a run that logs draws its learning curves
    rows = read_metrics(run)
    assert rows and all(k.count("/") == 1 for row in rows for k in row if k not in ("step", "time"))


@pytest.mark.timeout(300)
def test_torchrun_cartpole_reaches_475_and_holds_it(tmp_path, jobs):
    """The README's run without early stop: CartPole-v1 reaches 475 (10-seed sweep: docs/impala.md)
    and keeps it to the end of the budget, judged by the last policy's greedy evaluation. Floor
    350: the lowest training mean after 475 was 419.6 over docs/impala.md's 10-seed sweeps, 392.9
    and 438.5 in two runs of this test at load 4-7. 40 s: the sweeps reached 475 at a median 21.2 s
    (IQR 19.2-22.9) with 3 processes."""
    run = tmp_path / "run"
    proc = jobs.train(
        [
            "impala",
            "--env",
            "CartPole-v1",
            *hold_args(),
            "--max-time-s",
            "40",
            "--run-dir",
            str(run),
            "--logger",
            "none",
        ],
        nproc=3,
        timeout=220,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_held(read_summary(run), floor=350.0)
