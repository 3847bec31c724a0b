"""A hung env (a step that never returns) raises nothing and leaves the worker's transport threads
answering pings, so liveness alone never sees it. ``run.env_step_timeout_s`` bounds each step: the
worker ends itself in one line (``distrl/roles/env_recovery.py``'s ``StepWatch``), the learner
declares its rank lost, and once every actor is gone the job stops with a checkpoint, exit 4.

The unit tests drive a watch with a fake exit; the job test hangs both actors of an impala
``--nproc 3`` job at their 5th unroll (``DISTRL_FAULT=env_hang``). Figures print with -s."""

from __future__ import annotations

import json
import time

import pytest

from helpers import child_env, read_summary

TIMEOUT_S, GRACE_S = 2.0, 2.0


def test_a_step_past_the_timeout_ends_the_process_in_one_line(capsys):
    from distrl.roles.env_recovery import ENV_HUNG_EXIT, StepWatch

    exits: list[tuple[int, float]] = []
    watch = StepWatch("CartPole-v1", 0.4, "rank 2", exit=lambda code: exits.append((code, time.monotonic())))
    with watch:
        time.sleep(0.1)  # a quick step: nothing happens
    time.sleep(0.6)  # between steps: nothing is timed
    assert exits == []
    t0 = time.monotonic()
    with watch:
        while not exits and time.monotonic() - t0 < 5:
            time.sleep(0.02)  # the hung step
    assert [code for code, _ in exits] == [ENV_HUNG_EXIT]
    assert 0.4 <= exits[0][1] - t0 < 0.4 + 0.5, exits
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "[rank 2] env CartPole-v1: a step did not return in 0.4s (run.env_step_timeout_s); leaving, "
        "so the learner declares this rank lost"
    ], out


def test_a_zero_timeout_watches_nothing():
    from distrl.roles.env_recovery import StepWatch

    watch = StepWatch("CartPole-v1", 0.0, "rank 1", exit=lambda code: pytest.fail("exited"))
    with watch:
        time.sleep(0.05)
    assert watch._thread is None


def test_a_negative_timeout_is_refused_in_one_line():
    from distrl.cli.options import build_config, make_parser

    with pytest.raises(ValueError, match=r"run.env_step_timeout_s must be >= 0, got -1"):
        build_config(make_parser().parse_args(["impala", "--set", "run.env_step_timeout_s=-1"]))


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(120)
def test_every_env_hung_the_ranks_are_lost_and_the_job_exits_4_with_a_checkpoint(tmp_path, jobs):
    run = tmp_path / "run"
    args = [
        "impala",
        "--experiment",
        "debug",
        "--logger",
        "none",
        "--run-dir",
        str(run),
        "--total-frames",
        "100000000",
        "--max-time-s",
        "600",
        "--set",
        "run.log_interval_s=0.5",
        "--set",
        f"run.env_step_timeout_s={TIMEOUT_S:g}",
        "--set",
        f"run.peer_grace_s={GRACE_S:g}",
        "--nproc",
        "3",
    ]
    log = tmp_path / "faults.jsonl"
    env = child_env(DISTRL_FAULT="env_hang@1:5,env_hang@2:5", DISTRL_FAULT_LOG=str(log))
    # without the fix the job idles until --max-time-s: the wait below fails it long before
    proc = jobs.train(args, env=env, timeout=90)
    ended = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-4000:]
    hung = {r["rank"]: r["time"] for r in map(json.loads, log.read_text().splitlines()) if r["kind"] == "env_hang"}
    assert set(hung) == {1, 2}, hung
    for rank in (1, 2):
        assert f"[rank {rank}] env distrl/MatchSign-v0: a step did not return in {TIMEOUT_S:g}s" in out, out[-4000:]
    s = read_summary(run)
    assert s["stop_reason"] == "all_peers_lost", out[-3000:]
    assert {r: v["role"] for r, v in s["lost_ranks"].items()} == {"1": "actor", "2": "actor"}

    from distrl.runtime.checkpoint import list_checkpoints, load_latest_checkpoint

    newest = list_checkpoints(run)[-1]
    assert s["checkpoint"] == newest.relative_to(run).as_posix()
    assert newest.stat().st_mtime > max(hung.values())
    assert load_latest_checkpoint(run)["tracker"]["updates"] == s["learner_updates"]

    last = max(hung.values())
    lost = max(v["time"] for v in s["lost_ranks"].values()) - last
    down = ended - last
    print(f"\nevery env hung: both ranks lost {lost:.1f}s after the last hang, the job exited {down:.1f}s after")
    # the stated bound: env_step_timeout_s + its 1 s poll + a failed ping (ms) to lose a rank, then
    # the grace, the checkpoint and the job's teardown (docs/reliability.md's fault table)
    assert TIMEOUT_S <= lost < TIMEOUT_S + 1.0 + 3.0, lost
    assert down < TIMEOUT_S + 1.0 + GRACE_S + 20, down
