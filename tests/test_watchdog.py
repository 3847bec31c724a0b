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


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): a fault test of 14 s or more
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


# ---- armed from the first beat to the end: evaluations and checkpoints beat (issue #46) ------------


def _session(tmp_path, eval_episodes: int = 2):
    from distrl.config import override
    from distrl.recipes.impala.recipe import default as default_config
    from distrl.roles.session import LearnerSession
    from distrl.runtime.context import RoleContext

    cfg = override(default_config(), **{"run.logger": "none", "run.eval_episodes": eval_episodes})
    return LearnerSession(RoleContext(cfg, None, 0, {0: "learner"}, tmp_path))


def _evaluates(tmp_path, step_s: float, hang_at: int = 0) -> int:
    """A learner's greedy evaluation whose policy takes ``step_s`` a step (CartPole, always left:
    about 10 steps an episode), hanging for good at step ``hang_at`` (0: never)."""
    import torch

    session, steps = _session(tmp_path), 0

    def policy(obs: torch.Tensor) -> torch.Tensor:
        nonlocal steps
        steps += 1
        time.sleep(600 if steps == hang_at else step_s)
        return torch.zeros(obs.shape[0], 2)

    supervisor.beat()  # a loop turn: the watchdog is armed
    return 0 if len(session.greedy_returns(policy)) == 2 else 1


def test_an_evaluation_longer_than_the_watchdog_beats_through_it(tmp_path, no_leaked_processes):
    """Before: the evaluation never beat, so one longer than run.watchdog_s (a full-game Atari
    evaluation against the 300 s default) got the learner killed; now each step beats."""
    t0 = time.monotonic()
    status = supervisor.supervise(
        lambda: _evaluates(tmp_path, 0.3), 0, "learner", critical=True, grace_s=30, watchdog_s=1.5
    )
    assert status == 0 and time.monotonic() - t0 > 2.0  # it did outlast the watchdog's bound


def test_a_hung_step_in_an_evaluation_is_the_watchdogs(tmp_path, no_leaked_processes):
    t0 = time.monotonic()
    status = supervisor.supervise(
        lambda: _evaluates(tmp_path, 0.01, hang_at=3), 0, "learner", critical=True, grace_s=30, watchdog_s=1.0
    )
    assert status == supervisor.WATCHDOG_EXIT and time.monotonic() - t0 < 8.0


def _checkpoints(tmp_path, n: int, extra_s: float) -> int:
    """``n`` checkpoints whose role state (an Ape-X replay read from its shards) takes ``extra_s`` each."""
    import torch

    session = _session(tmp_path, eval_episodes=0)
    session.extra_state = lambda: (time.sleep(extra_s), {})[1]
    model = torch.nn.Linear(2, 2)
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    supervisor.beat()
    for _ in range(n):
        session.checkpoint(model, optim)
    return 0


def test_back_to_back_checkpoints_longer_than_the_watchdog_each_beat(tmp_path, no_leaked_processes):
    """Four checkpoints of 0.6 s each (2.4 s, against a 1.5 s watchdog): each part of each beats, so the
    learner lives; before, nothing in a checkpoint beat."""
    status = supervisor.supervise(
        lambda: _checkpoints(tmp_path, 4, 0.6), 0, "learner", critical=True, grace_s=30, watchdog_s=1.5
    )
    assert status == 0


def _waits_for_a_stop_signal(ready) -> int:
    from distrl.runtime.signals import StopSignals

    signals = StopSignals()
    signals.install()
    ready.touch()
    deadline = time.monotonic() + 20
    while signals.received is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return 128 + int(signals.received) if signals.received is not None else 0


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGINT])
def test_the_supervisor_forwards_every_stop_signal(sig, tmp_path, no_leaked_processes):
    """torchrun passes SIGINT, SIGHUP and SIGQUIT to its ranks as it does SIGTERM; the supervisor hands
    each to its role (before: SIGHUP and SIGQUIT killed the supervisor, and its role with it, with no
    checkpoint), which exits 128 + N."""
    import threading

    ready = tmp_path / "ready"

    def signal_once_ready():
        while not ready.exists():
            time.sleep(0.05)
        os.kill(os.getpid(), sig)  # to the supervisor: this process

    threading.Thread(target=signal_once_ready, name="distrl-test-signal", daemon=True).start()
    status = supervisor.supervise(
        lambda: _waits_for_a_stop_signal(ready), 0, "learner", critical=True, grace_s=30, watchdog_s=0
    )
    assert status == 128 + int(sig)
