"""A learner paused past the call timeout loses no actor (issue #46, part two): IMPALA's actors, SEED's
env workers and A3C's workers used to leave at the first call that timed out (``learner unreachable,
exiting``), so a learner stopped (SIGSTOP) or busy past ``transport.call_timeout_s`` came back to no
peers and stopped with ``all_peers_lost``, exit 4. Now each waits while the learner may be alive
(``distrl/transport/liveness.py``, the pings Ape-X's replay shards wait with): it goes on once a ping
is answered and leaves only when one fails (the learner gone) or after ``max(run.watchdog_s, call
timeout) + call timeout`` without an answer.

The job test: impala ``--nproc 3``, the learner SIGSTOPs itself at update 30 and is continued 4 s
later against a 2 s call timeout. The unit tests drive :func:`wait_while_alive` over a local hub."""

from __future__ import annotations

import threading
import time

import pytest

from distrl.runtime.checkpoint import load_latest_checkpoint
from distrl.transport.base import CallTimeoutError, PeerLostError
from distrl.transport.liveness import patience_s, wait_while_alive
from helpers import child_env, continue_after, read_summary, train_cmd

PAUSE_S = 4.0


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): a fault test of 14 s or more
@pytest.mark.timeout(150)
def test_impala_actors_wait_on_a_paused_learner_and_the_run_finishes(tmp_path, jobs):
    run = tmp_path / "run"
    args = ["impala", "--experiment", "debug", "--logger", "none", "--run-dir", str(run)]
    args += ["--total-frames", "100000000", "--max-time-s", "8", "--set", "transport.call_timeout_s=2"]
    job = jobs.start(train_cmd(args, nproc=3), env=child_env(DISTRL_FAULT="stop@0:30"))  # the learner stops itself
    job.wait_for("[fault] injecting stop on rank 0", 100)
    continue_after(job, PAUSE_S)
    rc = job.wait(60)
    out = job.output
    assert rc == 0, job.tail()
    for actor in (1, 2):  # each actor's send timed out, it waited, and went on
        assert f"[actor {actor}] the learner (rank 0) did not answer in 2s: waiting" in out, job.tail()
        assert f"[actor {actor}] the learner answered after" in out, job.tail()
    for gone in ("lost rank", "exiting", "unreachable", "every peer is lost"):
        assert gone not in out, job.tail()
    s = read_summary(run)
    assert s["stop_reason"] == "max_time" and not s["lost_ranks"], s
    assert load_latest_checkpoint(run)["tracker"]["updates"] > 30  # it trained on after the pause


# ---- the wait, in one process -----------------------------------------------------------------------


def _hub(call_timeout_s: float = 0.2):
    """An actor's endpoint (rank 1) beside a learner (rank 0) whose ping blocks until ``paused`` is clear."""
    from distrl.transport.local import LocalHub

    hub, running = LocalHub(2), threading.Event()
    hub.handlers[0]["ping"] = lambda _: (running.wait(5), None)[1]
    return hub, hub.endpoint(1, call_timeout_s), running


def test_an_actor_waits_on_a_paused_learner_and_goes_on_when_it_answers(capsys):
    hub, t, running = _hub()
    try:
        threading.Timer(0.7, running.set).start()  # the learner is continued 0.7 s later
        waited = wait_while_alive(t, 0, "actor 1", 0.2, limit_s=5.0)
        assert 0.6 < waited < 2.0, waited  # three pings timed out meanwhile: waited on, not left
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("[actor 1] the learner (rank 0) did not answer in 0.2s: waiting")
        assert lines[1].startswith("[actor 1] the learner answered after") and len(lines) == 2
    finally:
        running.set()
        hub.close()


def test_an_actor_leaves_a_gone_learner_at_once_and_a_silent_one_after_the_bound():
    hub, t, running = _hub()
    try:
        threading.Timer(0.3, lambda: hub.closed.__setitem__(0, True)).start()  # the learner's rank dies
        start = time.monotonic()
        with pytest.raises(PeerLostError):
            wait_while_alive(t, 0, "actor 1", 0.2, limit_s=30.0)
        assert time.monotonic() - start < 2.0  # at the first ping after it died, not the bound
        hub.closed[0] = False  # a learner that never answers again: left after the bound
        start = time.monotonic()
        with pytest.raises(CallTimeoutError):
            wait_while_alive(t, 0, "actor 1", 0.2, limit_s=0.8)
        assert 0.8 < time.monotonic() - start < 2.0
    finally:
        running.set()
        hub.close()
    assert patience_s(30, 300) == 330 and patience_s(30, 0) == 60  # the watchdog's bound, or two call timeouts
