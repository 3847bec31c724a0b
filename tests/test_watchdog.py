"""A frozen learner ends the job (issue #30, path 3): the rank's supervisor watches the learner
loop's beat (``distrl.runtime.supervisor.beat``) and kills a learner silent for ``run.watchdog_s``; the rank
exits 5 and torchrun ends every other rank, so nothing waits on it for ever. conftest checks that no
process and no shared-memory file is left behind. Figures are printed for the closing notes."""

from __future__ import annotations

import os
import signal
import time

import pytest

from distrl.runtime import supervisor
from helpers import child_env


def _beats_then(stop_how: str, beats: int = 5) -> int:
    for _ in range(beats):
        supervisor.beat()
        time.sleep(0.05)
    if stop_how == "sigstop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif stop_how == "sleep":  # a deadlock: alive, silent
        time.sleep(600)
    elif stop_how == "sleep_briefly":
        time.sleep(1.5)
    return 0


@pytest.mark.parametrize("stop_how", ["sigstop", "sleep"])
def test_a_silent_critical_child_is_killed_and_the_rank_exits_5(stop_how, no_leaked_processes):
    t0 = time.monotonic()
    status = supervisor.supervise(
        lambda: _beats_then(stop_how), 0, "learner", critical=True, grace_s=30, watchdog_s=1.0
    )
    took = time.monotonic() - t0
    assert status == supervisor.WATCHDOG_EXIT
    assert 1.0 < took < 5.0, took


def test_a_beating_child_and_a_silent_actor_are_left_alone(no_leaked_processes):
    """Progress keeps the learner alive past the watchdog; a frozen actor is the learner's
    liveness pings' business, not its supervisor's."""

    def beating() -> int:
        for _ in range(40):  # 2 s of beats against a 0.5 s watchdog
            supervisor.beat()
            time.sleep(0.05)
        return 0

    assert supervisor.supervise(beating, 0, "learner", critical=True, grace_s=30, watchdog_s=0.5) == 0
    quiet = lambda: _beats_then("sleep_briefly")  # noqa: E731
    assert supervisor.supervise(quiet, 1, "actor", critical=False, grace_s=30, watchdog_s=0.5) == 0
    never_beats = lambda: (time.sleep(1.5), 0)[1]  # noqa: E731  (SF's inference: critical, never watched)
    assert supervisor.supervise(never_beats, 1, "inference", critical=True, grace_s=30, watchdog_s=0.5) == 0


def test_the_watchdog_is_off_at_zero(no_leaked_processes):
    quiet = lambda: _beats_then("sleep_briefly")  # noqa: E731
    assert supervisor.supervise(quiet, 0, "learner", critical=True, grace_s=30, watchdog_s=0.0) == 0


@pytest.mark.timeout(240)
def test_an_sf_learner_sigstopped_ends_the_job_by_itself(tmp_path, jobs):
    """The issue's case: ``sf``, 4 processes, the learner SIGSTOPs itself at its 20th update.
    Before the watchdog the job ran on until killed (150 s and more)."""
    watchdog = 5.0
    fault_log = tmp_path / "faults.jsonl"
    args = [
        "sf",
        "--experiment",
        "debug",
        "--logger",
        "none",
        "--total-frames",
        "100000000",
        "--max-time-s",
        "600",
        "--run-dir",
        str(tmp_path / "run"),
        "--set",
        f"run.watchdog_s={watchdog:g}",
    ]
    env = child_env(DISTRL_FAULT="stop@0:20", DISTRL_FAULT_LOG=str(fault_log))
    proc = jobs.train(args, nproc=4, timeout=180, env=env)
    ended = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "watchdog: learner made no progress" in out, out[-3000:]
    import json

    stopped = json.loads(fault_log.read_text().splitlines()[0])["time"]
    print(
        f"\nsf learner SIGSTOPped: the job exited {ended - stopped:.1f}s after (watchdog {watchdog:g}s), "
        f"status {proc.returncode}"
    )
    assert ended - stopped < watchdog + 60
