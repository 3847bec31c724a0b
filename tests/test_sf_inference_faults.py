"""An ``sf`` inference rank killed or stopped (issue #46, part two). Inference is a critical role
(``Recipe.critical_roles``): its rollout workers cannot act without it.

- SIGKILL: its supervisor reports the role dead and the rank exits 1, so torchrun stops the job;
  the learner checkpoints on torchrun's SIGTERM and exits 143; the job ends at once.
- SIGSTOP (and never continued): each of its rollout workers waits ``algo.request_timeout_s`` for
  actions, then leaves in one line; the learner declares them lost, and the stopped inference rank
  after ``transport.call_timeout_s``; every source rank lost for ``run.peer_grace_s``, it stops with
  ``all_peers_lost``, a checkpoint and exit 4, and torchrun's SIGTERM (with the supervisor's
  SIGCONT) ends the stopped process. A pause shorter than ``algo.request_timeout_s`` is waited out.

Both: no process and nothing in ``/dev/shm`` left. Timeouts scaled down (call 4 s, request 2 s,
grace 1 s); figures print with -s."""

from __future__ import annotations

import json
import time

import pytest

from distrl.runtime.checkpoint import load_latest_checkpoint
from helpers import child_env, read_summary, shm_files, train_cmd

ARGS = ["sf", "--experiment", "debug", "--logger", "none", "--total-frames", "100000000", "--max-time-s", "60"]
ARGS += ["--set", "transport.call_timeout_s=4", "--set", "algo.request_timeout_s=2", "--set", "algo.slot_timeout_s=2"]
ARGS += ["--set", "run.peer_grace_s=1"]


def _run(tmp_path, jobs, fault: str):
    """``sf --nproc 3`` (learner, inference, a rollout worker) with ``fault`` on the inference rank:
    its exit status, output, summary, newest checkpoint and seconds from the fault to the job's end."""
    run, log = tmp_path / "run", tmp_path / "faults.jsonl"
    shm = shm_files()
    job = jobs.start(
        train_cmd([*ARGS, "--run-dir", str(run)], nproc=3), env=child_env(DISTRL_FAULT=fault, DISTRL_FAULT_LOG=str(log))
    )
    rc = job.wait(120)
    ended = time.time()
    assert log.exists(), job.tail()
    fired = json.loads(log.read_text().splitlines()[0])["time"]
    assert shm_files() <= shm, "shared memory left behind"
    ckpt = load_latest_checkpoint(run)
    assert ckpt is not None and ckpt["tracker"]["updates"] > 0, job.tail()
    return rc, job.output, read_summary(run), ended - fired


@pytest.mark.timeout(150)
def test_a_killed_inference_rank_ends_the_job_at_once_with_a_checkpoint(tmp_path, jobs):
    rc, out, s, took = _run(tmp_path, jobs, "kill@1:150")
    assert rc == 1, out[-3000:]  # the inference rank's status: a critical role died
    assert "[rank 1] inference ended with signal SIGKILL: the job cannot go on without it" in out
    assert "[learner] SIGTERM: stopping after a checkpoint" in out, out[-3000:]
    assert s["stop_reason"] == "sigterm"
    assert took < 15, took
    print(f"\nsf inference SIGKILLed: the job ended {took:.1f}s later, {s['learner_updates']} updates checkpointed")


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(150)
def test_a_stopped_inference_rank_ends_the_job_with_a_checkpoint_and_exit_4(tmp_path, jobs):
    rc, out, s, took = _run(tmp_path, jobs, "stop@1:150")
    assert rc == 1, out[-3000:]  # torchrun's status for a failed rank: the learner's 4
    assert "[rollout_worker 2] exiting: no reply from inference within 2s" in out, out[-3000:]
    assert "[learner] lost rank 1 (inference)" in out and "[rank 0] learner ended with exit status 4" in out
    assert s["stop_reason"] == "all_peers_lost" and set(s["lost_ranks"]) == {"1", "2"}, s
    assert took < 2 + 4 + 1 + 15, took  # request timeout, call timeout, grace, the checkpoint and the exits
    print(f"\nsf inference SIGSTOPped: the job ended {took:.1f}s later (exit 4 at the learner), nothing left")
