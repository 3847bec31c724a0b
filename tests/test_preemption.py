"""Preemption keeps its checkpoint wherever the learner is (issue #46, part two): a SIGTERM that comes
during an evaluation or a checkpoint still gives a checkpoint newer than the signal within 10 s;
SIGINT, SIGHUP and SIGQUIT (torchrun forwards all four) are handled as SIGTERM is, with exit status
128 + N; and Ctrl-C to ``distrl train --nproc`` checkpoints, exits 130 and leaves no shared memory.

conftest checks that no process and no shared-memory file is left behind. Figures are printed (-s)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from distrl.runtime.checkpoint import list_checkpoints, load_latest_checkpoint
from helpers import child_env, read_summary, shm_files, train_cmd

#: impala in one process (world size 1: the learner's session is the same as under torchrun)
IMPALA = ["impala", "--experiment", "debug", "--logger", "none", "--total-frames", "100000000", "--max-time-s", "120"]


def _fault_env(tmp_path: Path, fault: str) -> dict:
    return child_env(DISTRL_FAULT=fault, DISTRL_FAULT_LOG=str(tmp_path / "faults.jsonl"))


def _signalled_at(tmp_path: Path) -> float:
    """Wall-clock time of the first injected fault."""
    return json.loads((tmp_path / "faults.jsonl").read_text().splitlines()[0])["time"]


def _checkpoint_after(run: Path, sent: float) -> float:
    """Seconds from ``sent`` (wall clock) to the newest checkpoint's write; it must be after it (file
    times come from the kernel's coarse clock, which trails the wall clock by up to a tick: 50 ms kept)."""
    newest = list_checkpoints(run)[-1]
    took = newest.stat().st_mtime - sent
    assert took > -0.05, f"the newest checkpoint {newest.name} is {-took:.3f}s older than the signal"
    return took


@pytest.mark.timeout(120)
@pytest.mark.parametrize("recipe", ["impala", "vecenv"])  # vecenv evaluates on its own batched envs
def test_sigterm_during_an_evaluation_checkpoints_within_10s(recipe, tmp_path, jobs):
    """The learner SIGTERMs itself at step 3 of its first periodic evaluation (``eval_sigterm``): the
    evaluation stops there, the learner checkpoints and exits 143 (before: the evaluation ran its
    episodes out first, minutes for a full-game Atari one, past the supervisor's 30 s)."""
    run = tmp_path / "run"
    args = [recipe] + IMPALA[1:] + ["--run-dir", str(run), "--set", "run.eval_interval_s=2"]
    args += ["--set", "run.eval_episodes=50"]
    proc = jobs.train(args, env=_fault_env(tmp_path, "eval_sigterm@0:3"), timeout=90)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 143, out[-3000:]
    assert "[learner] SIGTERM: evaluation cut short at step 3" in out, out[-3000:]
    took = _checkpoint_after(run, _signalled_at(tmp_path))
    print(f"\nSIGTERM in an evaluation: checkpoint written {took:.2f}s after the signal")
    assert took < 10
    assert read_summary(run)["stop_reason"] == "sigterm"


@pytest.mark.timeout(120)
def test_sigterm_during_a_checkpoint_stops_on_that_checkpoint(tmp_path, jobs):
    """The learner SIGTERMs itself inside its first periodic checkpoint, before the write
    (``checkpoint_sigterm``): that checkpoint, written after the signal, holds every update, so the
    learner stops on it at once instead of writing another (for an Ape-X replay of gigabytes, a
    second write that would not fit in the supervisor's 30 s)."""
    run = tmp_path / "run"
    args = IMPALA + ["--run-dir", str(run), "--set", "run.checkpoint_interval_s=2"]
    proc = jobs.train(args, env=_fault_env(tmp_path, "checkpoint_sigterm@0:1"), timeout=90)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 143, out[-3000:]
    assert "[learner] SIGTERM: the newest checkpoint holds every update" in out, out[-3000:]
    took = _checkpoint_after(run, _signalled_at(tmp_path))
    print(f"\nSIGTERM in a checkpoint: the checkpoint finished {took:.2f}s after the signal")
    assert took < 10
    s = read_summary(run)
    assert s["stop_reason"] == "sigterm"
    assert load_latest_checkpoint(run)["tracker"]["updates"] == s["learner_updates"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_sigint_sighup_sigquit_checkpoint_as_sigterm_does(sig, tmp_path, jobs):
    """Before: Ctrl-C was a KeyboardInterrupt traceback, SIGHUP and SIGQUIT killed the run; none
    left a checkpoint of the updates since the last periodic one."""
    run = tmp_path / "run"
    job = jobs.start(train_cmd(IMPALA + ["--run-dir", str(run), "--set", "run.log_interval_s=0.5"]))
    job.wait_for("[impala] frames", 90)
    job.send(sig)
    sent = time.time()
    rc = job.wait(30)
    out = job.output
    assert rc == 128 + int(sig), job.tail()
    assert f"[learner] {sig.name}: stopping after a checkpoint" in out, job.tail()
    took = _checkpoint_after(run, sent)
    print(f"\n{sig.name}: exit {rc}, checkpoint written {took:.2f}s after the signal")
    assert took < 10
    assert read_summary(run)["stop_reason"] == sig.name.lower()


@pytest.mark.timeout(240)
def test_sigint_to_the_nproc_launcher_checkpoints_and_exits_130(tmp_path, jobs):
    """Ctrl-C to ``distrl train sf --nproc 3`` (torchrun forwards SIGINT to every rank): the learner
    checkpoints, the launcher exits 130, no shared-memory file is left (sf's slots and doorbells)."""
    run = tmp_path / "run"
    before = shm_files()
    args = ["sf", "--experiment", "debug", "--logger", "none", "--total-frames", "100000000"]
    args += ["--max-time-s", "300", "--run-dir", str(run), "--set", "run.log_interval_s=0.5", "--nproc", "3"]
    job = jobs.start(train_cmd(args))
    job.wait_for("[sf] frames", 180)
    job.send(signal.SIGINT)
    sent = time.time()
    rc = job.wait(60)
    took_exit = time.time() - sent
    assert rc == 130, job.tail()
    assert "[learner] SIGINT: stopping after a checkpoint" in job.output, job.tail()
    took = _checkpoint_after(run, sent)
    print(f"\nSIGINT to the --nproc launcher: checkpoint {took:.2f}s after, exit 130 {took_exit:.1f}s after")
    assert took < 10
    assert read_summary(run)["stop_reason"] == "sigint"
    assert shm_files() <= before, sorted(map(str, shm_files() - before))
