"""The whole Ape-X job told to stop (SIGTERM to the launcher, as a scheduler does at the end of an
allocation): the replay shards get the signal with the learner, yet the learner's last checkpoint
holds their contents, the job exits within a bound, and ``--resume`` starts from that replay.

Figures (time from the signal to the exit, transitions saved and restored) are printed: run with -s."""

from __future__ import annotations

import io
import re
import signal
import time

import pytest
import torch

from helpers import read_summary, train_cmd

ARGS = ["apex", "--experiment", "debug", "--max-time-s", "170"]


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): a fault test of 14 s or more
@pytest.mark.timeout(300)
def test_sigterm_to_the_whole_job_keeps_the_replay_for_resume(tmp_path, jobs):
    run = tmp_path / "run"
    # --nproc 3 (learner, one shard, one actor): the shard's and the actors' stop paths are those of
    # a bigger job, and one process fewer to start twice on 2 cores
    job = jobs.start(train_cmd(ARGS + ["--run-dir", str(run), "--total-frames", "10000000"], nproc=3))
    job.wait_for("[apex] frames", 120)  # training: the shard holds transitions
    time.sleep(1)
    job.send(signal.SIGTERM)
    sent = time.monotonic()
    rc = job.wait(60)
    took = time.monotonic() - sent
    from distrl.runtime.checkpoint import load_latest_checkpoint

    saved = load_latest_checkpoint(run)["extra"]["replay"]  # {shard rank: its contents, serialised}
    assert set(saved) == {1} and all(state.numel() > 0 for state in saved.values()), f"{saved}\n{job.tail()}"
    # transitions in the checkpoint: every insert so far (the debug preset's capacity is far away)
    in_checkpoint = torch.load(io.BytesIO(saved[1].numpy().tobytes()), weights_only=False)["store"]["inserted"]
    out = job.output
    # The learner prints its line before it checkpoints, so the line is promised to reach the output.
    # The shard's own SIGTERM line is not asserted: the shard prints it from its loop, which may still
    # sit in a 0.2 s inbox wait when the learner has read the replay and torchrun ends the job. What
    # the user relies on is above (the shard's contents in the checkpoint) and below (the exit, the
    # summary and the resume).
    assert rc != 0 and "SIGTERM: stopping after a checkpoint" in out, job.tail()
    s = read_summary(run)
    assert s["stop_reason"] == "sigterm" and s["replay_size"] > 0, s
    print(
        f"\nSIGTERM to the apex job: exited {took:.1f}s after the signal, replay of {in_checkpoint:,} "
        "transitions in the checkpoint"
    )
    assert took < 30  # torchrun SIGKILLs the ranks 30 s after it forwards the signal

    frames = s["env_frames"]
    resumed = jobs.train(
        ARGS + ["--run-dir", str(run), "--resume", "--total-frames", str(frames + 3000)], nproc=3, timeout=150
    )
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-4000:]
    assert "[learner] resumed from update" in out, out[-4000:]
    restored = re.search(r"\[replay 1\] restored ([\d,]+) transitions", out)
    assert restored, out[-4000:]
    n = int(restored.group(1).replace(",", ""))
    print(f"resumed: the shard restored {n:,} transitions")
    assert n == in_checkpoint > 0  # (summary.json's replay_size is the shard's last stats reply, older)
    assert read_summary(run)["env_frames"] > frames
