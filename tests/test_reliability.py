"""Fault injection (distrl/runtime/faults.py): each test breaks one thing on purpose and checks that the
job notices, goes on or stops cleanly, and leaves no process behind. Figures it measures (time to
detect, throughput kept, time to checkpoint) are printed for the closing notes: run with -s.

Every inner timeout (a job's, a wait's) adds up to well under the test's own ``timeout`` mark, so a
job that hangs fails its test with its output, and the ``jobs`` fixture still kills it."""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from helpers import child_env, proc_state, read_metrics, read_summary, train_cmd

# A small, quick impala job on the toy env; tests lengthen it with --total-frames.
DEBUG = ["impala", "--experiment", "debug", "--logger", "none", "--set", "run.log_interval_s=0.5"]


def faulty_env(tmp_path: Path, fault: str) -> dict:
    return child_env(DISTRL_FAULT=fault, DISTRL_FAULT_LOG=str(tmp_path / "faults.jsonl"))


def fault_times(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(240)
def test_sigkill_one_of_three_actors_the_run_goes_on(tmp_path, jobs):
    run = tmp_path / "run"
    # --max-time-s 170: the frame budget ends the run even on a loaded machine (debug's 60 s did not)
    proc = jobs.train(
        DEBUG + ["--run-dir", str(run), "--total-frames", "130000", "--max-time-s", "170"],
        nproc=4,
        env=faulty_env(tmp_path, "kill@2:150"),
        timeout=200,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    s = read_summary(run)
    lost = s["lost_ranks"]["2"]
    assert lost["role"] == "actor" and s["stop_reason"] == "total_frames"
    assert out.count("[learner] lost rank 2 (actor)") == 1
    detect = lost["time"] - fault_times(tmp_path)[0]["time"]
    rows = read_metrics(run)
    before = [r["learner/fps"] for r in rows if r["time"] < lost["time"] - 0.5][1:]
    after = [r["learner/fps"] for r in rows if r["time"] > lost["time"] + 1.0][:-1]
    # rows every 0.5 s; the kill comes after 72k frames (150 unrolls of 160 frames from each of 3
    # actors, seconds of rows) and 58k frames are left after it (seconds of rows at ~20k fps, more
    # on a slower machine: the rows are timed, not counted in frames)
    assert before and after, f"no throughput rows on one side of the loss: {len(before)} before, {len(after)} after"
    kept = (sum(after) / len(after)) / (sum(before) / len(before))
    print(
        f"\nSIGKILL actor: detected in {detect * 1000:.0f} ms (at {lost['wall_s']:.1f}s), throughput kept {kept:.0%} "
        f"with 2 of 3 actors; {s['fps']:.0f} fps overall"
    )
    # a lost connection noticed (10 ms when idle), not the 30 s call timeout; room for a loaded machine
    assert detect < 5.0
    assert kept > 0.5  # 2 cores shared by 4 processes: losing 1 of 3 actors costs at most ~1/3


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(240)
def test_sigstop_actor_is_declared_lost_within_the_call_timeout(tmp_path, jobs):
    run = tmp_path / "run"
    timeout_s = 3.0
    job = jobs.start(
        train_cmd(
            DEBUG
            + ["--run-dir", str(run), "--total-frames", "120000", "--set", f"transport.call_timeout_s={timeout_s}"],
            nproc=3,
        ),
        env=faulty_env(tmp_path, "stop@2:40"),
    )
    job.wait_for("lost rank 2 (actor)", timeout=90)
    tree = {p: proc_state(p) for p in job.pids()}
    stopped = [p for p, st in tree.items() if st == "T"]
    assert stopped, f"the stopped actor was not found in {tree}"
    for pid in stopped:  # wake it: its late messages must be ignored, not learned from
        os.kill(pid, signal.SIGCONT)
    assert job.wait(100) == 0, job.tail(4000)
    s = read_summary(run)
    detect = s["lost_ranks"]["2"]["time"] - fault_times(tmp_path)[0]["time"]
    print(f"\nSIGSTOP actor: declared lost after {detect:.2f}s (call timeout {timeout_s}s)")
    assert timeout_s * 0.8 <= detect <= timeout_s + 2.0
    assert s["stop_reason"] == "total_frames" and s["eval_return_mean"] >= 19


@pytest.mark.timeout(120)
def test_env_error_recreates_the_env_and_goes_on(tmp_path, jobs):
    run = tmp_path / "run"
    proc = jobs.train(DEBUG + ["--run-dir", str(run)], env=faulty_env(tmp_path, "env_error@1:5"), timeout=80)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["counters"]["env_errors"] == 1
    assert "recreating it and dropping the partial trajectory" in proc.stdout
    assert s["eval_return_mean"] >= 19


@pytest.mark.timeout(120)
def test_bad_observations_are_rejected_and_counted(tmp_path, jobs):
    run = tmp_path / "run"
    proc = jobs.train(DEBUG + ["--run-dir", str(run)], env=faulty_env(tmp_path, "bad_obs@1:3"), timeout=80)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["counters"]["rejected_trajectories"] > 0
    assert "rejected a trajectory from rank 1: observation (8, 20, 2) torch.float64" in proc.stdout
    assert s["eval_return_mean"] >= 19  # the other actor's data still taught it


@pytest.mark.timeout(120)
def test_nan_loss_is_skipped_then_stops_with_the_last_good_checkpoint(tmp_path, jobs):
    run = tmp_path / "run"
    args = DEBUG + ["--run-dir", str(run), "--total-frames", "10000000", "--set", "run.checkpoint_interval_s=0.1"]
    proc = jobs.train(args, env=faulty_env(tmp_path, "nan_loss@0:15"), timeout=80)
    assert proc.returncode == 3, proc.stdout[-3000:]
    s = read_summary(run)
    assert s["stop_reason"] == "nonfinite_loss" and s["counters"]["skipped_nonfinite_updates"] == 10
    assert "non-finite losses in a row" in proc.stdout
    from distrl.runtime.checkpoint import load_latest_checkpoint

    ckpt = load_latest_checkpoint(run)
    assert ckpt["tracker"]["updates"] <= 15
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values())


@pytest.mark.timeout(120)
def test_a_rank_that_never_starts_is_named(tmp_path, jobs):
    init_timeout_s = 5
    t0 = time.monotonic()
    args = DEBUG + ["--run-dir", str(tmp_path / "run"), "--set", f"transport.init_timeout_s={init_timeout_s}"]
    # --nproc 2: the learner and the one actor that never starts (a third process adds only start-up)
    proc = jobs.train(args, nproc=2, env=faulty_env(tmp_path, "never_start@1"), timeout=80)
    took, since_fault = time.monotonic() - t0, time.time() - fault_times(tmp_path)[0]["time"]
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert f"rank 1 (actor) did not start within {init_timeout_s}s" in out, out[-3000:]
    print(
        f"\nnever-started rank: job failed {since_fault:.1f}s after the rank stalled ({took:.1f}s in all) "
        f"with init timeout {init_timeout_s}s"
    )
    # From the stall (the other ranks start waiting then): the init timeout, then torchrun notices
    # and tears the ranks down (~15 s on 2 busy cores). The stalled rank sleeps 10 x the init
    # timeout: a job that ended only when it woke would take 50 s. Start-up (5-20 s under load)
    # is not what is measured here.
    assert since_fault < init_timeout_s + 30, since_fault


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): a fault test of 14 s or more
@pytest.mark.timeout(300)
def test_learner_sigkill_stops_the_job_and_a_restart_resumes(tmp_path, jobs):
    run = tmp_path / "run"
    args = DEBUG + ["--run-dir", str(run), "--total-frames", "300000", "--set", "run.checkpoint_interval_s=0.2"]
    proc = jobs.train(args, nproc=3, env=faulty_env(tmp_path, "kill@0:60"), timeout=80)
    down = time.time() - fault_times(tmp_path)[0]["time"]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "learner ended with signal SIGKILL" in out, out[-3000:]
    assert not (run / "summary.json").exists()
    print(f"\nlearner SIGKILL: the whole job exited {down:.1f}s after the kill")
    assert down < 30

    # the same job under --max-restarts=1: torchrun restarts it, the learner resumes
    run2 = tmp_path / "run2"
    # 35k frames: the kill comes at update 60 (19.2k frames of 320 a batch), so ~16k are left to resume into
    args2 = DEBUG + ["--run-dir", str(run2), "--total-frames", "35000", "--set", "run.checkpoint_interval_s=0.2"]
    cmd = train_cmd(args2, nproc=3)
    cmd.insert(cmd.index("torch.distributed.run") + 1, "--max-restarts=1")
    job = jobs.start(cmd, env=faulty_env(tmp_path, "kill@0:60"))
    assert job.wait(170) == 0, job.tail(4000)
    out = job.output
    assert "[learner] resumed from update" in out
    resumed_at = int(out.split("[learner] resumed from update ")[1].split(",")[0])
    assert 0 < resumed_at <= 60
    s = read_summary(run2)
    assert s["stop_reason"] == "total_frames" and s["learner_updates"] > resumed_at


def _in_process_learner(args: list[str]):
    """An impala learner built in this process from ``args`` (its ``--run-dir`` and ``--resume``
    decide what it restores), on an in-process transport; returns it and a closer."""
    from distrl.runtime.context import RoleContext
    from distrl.cli.options import build_config, make_parser
    from distrl.recipes.impala.learner import ImpalaLearner
    from distrl.transport.local import LocalHub

    cfg = build_config(make_parser().parse_args(args))
    hub = LocalHub(2)
    learner = ImpalaLearner(RoleContext(cfg, hub.endpoint(0), 0, {0: "learner", 1: "actor"}, Path(cfg.run.run_dir)))

    def close() -> None:
        learner.session.tracker.writer.close()
        hub.pool.shutdown()

    return learner, close


def _fixed_batch(learner, seed: int, B: int = 4, T: int = 20) -> TensorDict:
    """A ``[B, T]`` trajectory batch for ``learner`` drawn from its own generator (the global RNGs
    are what the test compares, so they are left alone)."""
    g = torch.Generator().manual_seed(seed)
    (F,), A = learner.model.obs_shape, learner.model.num_actions
    done = torch.rand(B, T, 1, generator=g) < 0.05
    return TensorDict(
        {
            "observation": torch.randn(B, T, F, generator=g),
            "action": torch.randint(A, (B, T), generator=g),
            "action_log_prob": torch.full((B, T), -float(np.log(A))),
            "policy_version": torch.zeros(B, T, dtype=torch.int64),
            "next": {
                "observation": torch.randn(B, T, F, generator=g),
                "reward": torch.rand(B, T, 1, generator=g),
                "done": done,
                "terminated": done.clone(),
            },
        },
        batch_size=[B, T],
    )


def _draws() -> tuple:
    """The next random numbers of torch's, numpy's and Python's global generators."""
    return torch.rand(16), np.random.rand(16), [random.random() for _ in range(16)]


def _assert_rng_is(rng: dict) -> None:
    assert torch.equal(torch.get_rng_state(), rng["torch"]), "torch's RNG state was not restored"
    mine, saved = np.random.get_state(), rng["numpy"]
    assert mine[0] == saved[0] and np.array_equal(mine[1], saved[1]) and mine[2:] == saved[2:], (
        "numpy's RNG state was not restored"
    )
    assert random.getstate() == rng["python"], "Python's RNG state was not restored"


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): a fault test of 14 s or more
@pytest.mark.timeout(300)
def test_sigterm_checkpoints_and_resume_continues_exactly(tmp_path, jobs, training):
    """SIGTERM makes the learner of a real job checkpoint within seconds; a learner resumed from a
    checkpoint then continues exactly as the one that wrote it went on: the same parameters and
    optimizer state after the next update on the same batch, and the same next random draws."""
    run = tmp_path / "run"
    args = DEBUG + ["--run-dir", str(run), "--total-frames", "10000000", "--logger", "wandb"]
    proc = jobs.train(args, nproc=3, env=faulty_env(tmp_path, "sigterm@0:40"), timeout=90)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "SIGTERM: stopping after a checkpoint" in out, out[-3000:]
    from distrl.runtime.checkpoint import list_checkpoints, load_latest_checkpoint

    newest = list_checkpoints(run)[-1]
    took = newest.stat().st_mtime - fault_times(tmp_path)[0]["time"]
    ckpt = load_latest_checkpoint(run)
    print(f"\nSIGTERM learner: checkpoint written {took:.2f}s after the signal")
    assert took < 10 and ckpt["tracker"]["updates"] >= 40
    assert ckpt["wandb_id"] == (run / "wandb_id").read_text().strip()

    # In this process, on a copy of those checkpoints: learner A resumes from the job's checkpoint
    # (update k), takes one update on batch 1, checkpoints on a real SIGTERM, takes one more on
    # batch 2 and draws random numbers. Learner B resumes from A's checkpoint and does the same.
    resume = tmp_path / "resume"
    shutil.copytree(run / "checkpoints", resume / "checkpoints")
    shutil.copy(run / "config.json", resume / "config.json")
    in_proc = [
        "impala",
        "--experiment",
        "debug",
        "--logger",
        "none",
        "--run-dir",
        str(resume),
        "--resume",
        "--total-frames",
        "10000000",
    ]
    k = ckpt["tracker"]["updates"]
    a, close_a = _in_process_learner(in_proc)
    try:
        _assert_rng_is(ckpt["rng"])  # nothing between restore() and here draws
        assert (a.session.tracker.updates, a.session.tracker.env_frames) == (k, ckpt["tracker"]["env_frames"])
        batches = [_fixed_batch(a, seed) for seed in (1, 2)]
        a.update(batches[0])
        _draws()  # a learner draws between checkpoints: the next one must hold where its RNGs stand
        os.kill(os.getpid(), signal.SIGTERM)  # the session's handler only flags it
        assert a.session.should_stop() and a.session.stop_reason == "sigterm"
        assert list_checkpoints(resume)[-1].name == f"ckpt_{k + 1:010d}.pt"
        a.update(batches[1])
        expected = {name: t.clone() for name, t in a.model.state_dict().items()}
        expected_optim = copy.deepcopy(a.optim.state_dict())
        expected_draws = _draws()
        assert a.session.tracker.updates == k + 2
    finally:
        close_a()
    del a

    b, close_b = _in_process_learner(in_proc)
    try:
        assert b.session.tracker.updates == k + 1
        b.update(batches[1])
        assert b.session.tracker.updates == k + 2
        got = b.model.state_dict()
        differ = [name for name, t in expected.items() if not torch.equal(got[name], t)]
        assert not differ, f"parameters after the continued update differ: {differ}"
        got_optim = b.optim.state_dict()
        assert got_optim["state"].keys() == expected_optim["state"].keys() and expected_optim["state"]
        for i, state in expected_optim["state"].items():
            for name, t in state.items():
                assert torch.equal(got_optim["state"][i][name], t), f"optimizer state {i}.{name} differs"
        draws = _draws()
        assert torch.equal(draws[0], expected_draws[0]), "torch's next random draws differ"
        assert np.array_equal(draws[1], expected_draws[1]), "numpy's next random draws differ"
        assert draws[2] == expected_draws[2], "Python's next random draws differ"
    finally:
        close_b()
    del b

    # and a relaunch of the job continues the same W&B run
    more = str(ckpt["tracker"]["env_frames"] + 5000)
    proc = jobs.train(args[:-2] + ["--logger", "wandb", "--resume", "--total-frames", more], nproc=3, timeout=90)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    runs = sorted(p.name for p in (run / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and len({r.rsplit("-", 1)[1] for r in runs}) == 1, runs  # one W&B run, resumed


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(240)
def test_seed_sigkill_one_env_worker_the_run_goes_on(tmp_path, jobs):
    """The same guarantee for SEED's env workers: the inference server drops the lost rank."""
    run = tmp_path / "run"
    # the kill comes at rank 2's 200th step of 16 envs (~6.4k frames from both workers): 20k frames leave
    # twice that for the run to go on with one worker; the frame budget ends it even on a loaded machine
    args = [
        "seed",
        "--experiment",
        "debug",
        "--logger",
        "none",
        "--run-dir",
        str(run),
        "--total-frames",
        "20000",
        "--max-time-s",
        "170",
    ]
    proc = jobs.train(args, nproc=3, env=faulty_env(tmp_path, "kill@2:200"), timeout=200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    s = read_summary(run)
    assert s["lost_ranks"]["2"]["role"] == "env_worker" and s["stop_reason"] == "total_frames"
    detect = s["lost_ranks"]["2"]["time"] - fault_times(tmp_path)[0]["time"]
    print(f"\nSIGKILL seed env worker: detected in {detect * 1000:.0f} ms")
    # a lost connection noticed (10 ms when idle), not the 30 s call timeout; room for a loaded machine
    assert detect < 5.0


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): a fault test of 14 s or more
@pytest.mark.timeout(240)
def test_apex_sigkill_one_of_two_replay_shards_the_run_goes_on(tmp_path, jobs):
    """Ape-X with 2 shards (learner, shards 1-2, actors 3-4): shard 2 dies at its 40th insert;
    the learner names it in one line and samples shard 1 to the end of the frame budget."""
    run = tmp_path / "run"
    args = [
        "apex",
        "--experiment",
        "debug",
        "--run-dir",
        str(run),
        "--set",
        "algo.shards=2",
        "--total-frames",
        "16000",
        "--max-time-s",
        "170",
    ]
    proc = jobs.train(args, nproc=5, env=faulty_env(tmp_path, "kill@2:40"), timeout=200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    s = read_summary(run)
    assert s["lost_ranks"]["2"]["role"] == "replay" and s["stop_reason"] == "total_frames", out[-3000:]
    assert sum("lost rank 2 (replay)" in line for line in out.splitlines()) == 1, out[-3000:]
    detect = s["lost_ranks"]["2"]["time"] - fault_times(tmp_path)[0]["time"]
    print(f"\nSIGKILL one of two replay shards: detected in {detect * 1000:.0f} ms, eval {s['eval_return_mean']}")
    assert detect < 5.0 and s["eval_return_mean"] >= 19.0  # uniform play scores 10, perfect 20


@pytest.mark.timeout(240)
def test_apex_sigkill_the_only_replay_shard_stops_with_a_checkpoint(tmp_path, jobs):
    """With no shard left there is nothing to learn from: the learner stops, says why in one line,
    writes a checkpoint and the job exits 0 (it ended as documented, not by a crash)."""
    run = tmp_path / "run"
    args = ["apex", "--experiment", "debug", "--run-dir", str(run), "--total-frames", "200000", "--max-time-s", "170"]
    proc = jobs.train(args, nproc=3, env=faulty_env(tmp_path, "kill@1:40"), timeout=200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    s = read_summary(run)
    assert s["stop_reason"] == "replay_lost" and s["lost_ranks"]["1"]["role"] == "replay", out[-3000:]
    assert "every replay shard is lost" in out and list((run / "checkpoints").glob("ckpt_*.pt"))
