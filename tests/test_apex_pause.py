"""A paused Ape-X learner loses nothing (issue #46, part two): stopped past the shards' idle bound
and past the call timeout, then continued, the learner finds every replay shard and actor where it
left them, the run finishes its budget, and its checkpoint holds the replay (``best.pt`` does not).

The operator's case is a learner busy or stopped 70 s against the defaults (``algo.shard_idle_s``
60, ``transport.call_timeout_s`` 30). Here the same code paths in seconds: shard idle bound 2 s, call
timeout 2 s, the learner stopped 5 s, so each shard asks the stopped learner and waits, the learner's
pings and samples sent before its pause time out unread, and the actor's parameter request times out.
Figures are printed (-s)."""

from __future__ import annotations

import json
import time

import pytest

from distrl.runtime.checkpoint import best_checkpoint_path, load_checkpoint, load_latest_checkpoint
from helpers import child_env, continue_after, read_summary, train_cmd

# the pause is 2.5 times each bound it must outlast; the run's budget is the learner's way to its
# stop at update 30 (MEASURED), the pause, and seconds of training after it
IDLE_S, CALL_TIMEOUT_S, PAUSE_S, MAX_TIME_S = 2.0, 2.0, 5.0, 25


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): a fault test of 14 s or more
@pytest.mark.timeout(240)
def test_a_learner_paused_past_every_bound_loses_no_shard_and_finishes(tmp_path, jobs):
    run, log = tmp_path / "run", tmp_path / "faults.jsonl"
    args = ["apex", "--experiment", "debug", "--logger", "none", "--run-dir", str(run)]
    args += ["--total-frames", "100000000", "--max-time-s", f"{MAX_TIME_S:g}", "--set", "run.eval_interval_s=5"]
    args += ["--set", f"algo.shard_idle_s={IDLE_S:g}", "--set", f"transport.call_timeout_s={CALL_TIMEOUT_S:g}"]
    env = child_env(DISTRL_FAULT="stop@0:30", DISTRL_FAULT_LOG=str(log))  # the learner SIGSTOPs itself
    launched = time.time()
    job = jobs.start(train_cmd(args, nproc=3), env=env)
    job.wait_for("[fault] injecting stop on rank 0", 150)
    continue_after(job, PAUSE_S)
    continued = time.time()
    rc = job.wait(120)
    out = job.output
    assert rc == 0, job.tail()
    assert f"[replay 1] no word from the learner in {IDLE_S:g}s: asking it" in out, job.tail()  # the path was taken
    for gone in ("lost rank", "exiting", "learner unreachable", "replay_lost"):
        assert gone not in out, job.tail()
    s = read_summary(run)
    assert s["stop_reason"] == "max_time" and not s.get("lost_ranks"), s
    ckpt = load_latest_checkpoint(run)
    replay = ckpt["extra"]["replay"]
    assert set(replay) == {1} and replay[1].numel() > 0
    assert ckpt["tracker"]["updates"] > 30  # it trained on after the pause
    stopped_at = json.loads(log.read_text().splitlines()[0])["time"]
    paused = continued - stopped_at
    best = best_checkpoint_path(run)
    assert best.exists() and "extra" not in load_checkpoint(best), "best.pt carries the replay"
    print(
        f"\napex learner stopped {stopped_at - launched:.1f}s after the launch, paused {paused:.1f}s "
        f"(shard idle {IDLE_S:g} s, call timeout {CALL_TIMEOUT_S:g} s): no rank lost, "
        f"{ckpt['tracker']['updates']} updates, replay of {replay[1].numel() / 2**20:.1f} MiB in the checkpoint, "
        f"best.pt {best.stat().st_size / 2**10:.0f} KiB"
    )


# ---- the pieces, in one process (quick tier) --------------------------------------------------------


def _hub_shard(idle_s: float, call_timeout_s: float):
    """A replay shard (rank 1) beside a learner rank (0) of a local hub."""
    from pathlib import Path

    from distrl.config import Config, RunConfig, TransportConfig
    from distrl.replay.config import ReplayConfig
    from distrl.replay.server import ReplayServer
    from distrl.runtime.context import RoleContext
    from distrl.transport.local import LocalHub

    replay = ReplayConfig(capacity=64, min_size=0, idle_s=idle_s)
    cfg = Config(
        recipe="replay", algo=replay, run=RunConfig(), transport=TransportConfig(call_timeout_s=call_timeout_s)
    )
    hub = LocalHub(2)
    ctx = RoleContext(cfg, hub.endpoint(1, call_timeout_s), 1, {0: "learner", 1: "replay"}, Path("."))
    return hub, ReplayServer(ctx, replay)


def _until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_shard_waits_on_a_paused_learner_and_leaves_a_gone_one():
    """Past its idle bound the shard asks the learner; an unanswered ping (a paused learner) keeps it,
    an answer is a word from the learner, a failed ping (the learner gone) ends it. The learner's own
    pings count as words."""
    import threading

    hub, shard = _hub_shard(idle_s=0.2, call_timeout_s=0.3)
    paused = threading.Event()
    hub.handlers[0]["ping"] = lambda _: (paused.wait(5), None)[1]  # a learner that cannot answer yet
    try:
        time.sleep(0.3)
        start = time.monotonic()
        assert not _until(shard.watch.wait_over, 1.2)  # silent 1.5 s against idle 0.2 s: waited for
        assert shard.watch.asking and time.monotonic() - shard.watch.last_contact > 1.0
        paused.set()  # it goes on, and answers the next ping
        assert _until(lambda: not shard.watch.wait_over() and time.monotonic() - shard.watch.last_contact < 0.5, 2.0)
        shard.ctx.transport.call_sync(1, "ping")  # the learner's own ping (a call from its rank)
        assert time.monotonic() - shard.watch.last_contact < 0.1
        time.sleep(0.3)
        hub.closed[0] = True  # the learner's rank is gone: the next ping fails
        assert _until(shard.watch.wait_over, 2.0), time.monotonic() - start
    finally:
        paused.set()
        hub.close()


def test_a_timed_out_call_keeps_its_shard_a_failed_one_loses_it():
    """A shard busy in one slow call (its whole replay serialised under its lock) times out the calls
    behind it: counted, the shard kept (the pings decide); a failed call (the shard gone) loses it."""
    import threading

    from distrl.replay.client import ShardedReplayClient
    from distrl.transport.local import LocalHub

    hub, busy, lost = LocalHub(2), threading.Event(), []
    hub.handlers[1]["sample"] = lambda _: (busy.wait(5), None)[1]
    t = hub.endpoint(0, 0.3)
    client = ShardedReplayClient(t, [1], 0.3, 0, lambda r, why: (lost.append(r), t.mark_lost(r, why)))
    try:
        assert client.collect(client.request(8), beta=0.4) is None
        assert client.timeouts == 1 and client.live == [1] and not lost
        busy.set()
        hub.closed[1] = True
        assert client.collect(client.request(8), beta=0.4) is None
        assert lost == [1] and client.live == []
    finally:
        busy.set()
        hub.close()


def test_a_ping_that_timed_out_across_our_own_pause_loses_no_peer():
    """A learner stopped (SIGSTOP) and continued finds its pings of before the pause timed out unread:
    they say nothing of the peers (``paused_since``); the same timeout without a pause loses the peer."""
    import threading
    from types import SimpleNamespace

    from distrl.config import Config, RunConfig, TransportConfig
    from distrl.roles.peers import PeerWatch
    from distrl.runtime.context import RoleContext
    from distrl.transport.local import LocalHub

    cfg = Config(recipe="replay", algo=None, run=RunConfig(), transport=TransportConfig(call_timeout_s=0.2))
    for paused in (True, False):
        hub, stuck = LocalHub(2), threading.Event()
        hub.handlers[1]["ping"] = lambda _: (stuck.wait(5), None)[1]
        tracker = SimpleNamespace(lost={}, count=lambda _: 1, wall_s=0.0)
        ctx = RoleContext(cfg, hub.endpoint(0, 0.2), 0, {0: "learner", 1: "replay"}, ".")
        watch = PeerWatch(ctx, tracker, lambda sent: paused)
        try:
            watch.heartbeat()  # the ping goes out
            time.sleep(0.4)  # and times out
            watch.heartbeat()
            assert (1 in tracker.lost) is not paused
        finally:
            stuck.set()
            hub.close()
