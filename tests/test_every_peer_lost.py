"""Every actor dies: the learner notices while it waits for data, waits ``run.peer_grace_s``, then
checkpoints, names the lost ranks in one line and exits with status 4 (``all_peers_lost``), so a
job under ``torchrun --max-restarts`` restarts and resumes instead of idling to ``max_time_s``.

The quick test drives :meth:`LearnerSession.should_stop` alone (no ``tick``: a learner waiting for
data calls only that) over the in-process transport; the others kill both actors of a real
``--nproc 3`` impala job. Figures are printed for the closing notes: run with -s."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from helpers import child_env, read_summary, train_cmd

# A small, quick impala job on the toy env; the frame and time budgets are far away, so only the
# loss of every actor can end it in time.
DEBUG = ["impala", "--experiment", "debug", "--logger", "none", "--set", "run.log_interval_s=0.5"]
GRACE_S = 2.0
KILL_BOTH = "kill@1:40,kill@2:40"  # each actor SIGKILLs itself at its 40th unroll


def faulty_env(tmp_path: Path, fault: str) -> dict:
    return child_env(DISTRL_FAULT=fault, DISTRL_FAULT_LOG=str(tmp_path / "faults.jsonl"))


def kill_times(tmp_path: Path) -> dict[int, float]:
    """Rank -> wall-clock time of its injected SIGKILL (first attempt only: faults skip restarts)."""
    lines = (tmp_path / "faults.jsonl").read_text().splitlines()
    return {r["rank"]: r["time"] for r in map(json.loads, lines) if r["kind"] == "kill"}


def test_should_stop_alone_notices_every_peer_lost_after_the_grace(tmp_path, capsys):
    from distrl.cli.options import build_config, make_parser
    from distrl.runtime.context import RoleContext
    from distrl.roles.session import LearnerSession
    from distrl.transport.local import LocalHub

    grace = 0.5
    argv = DEBUG + ["--run-dir", str(tmp_path), "--set", f"run.peer_grace_s={grace}"]
    cfg = build_config(make_parser().parse_args(argv))
    hub = LocalHub(3, num_threads=4)
    peers = [hub.endpoint(r) for r in (1, 2)]
    for p in peers:
        p.serve("ping", lambda td: None)
    session = LearnerSession(RoleContext(cfg, hub.endpoint(0), 0, {0: "learner", 1: "actor", 2: "actor"}, tmp_path))
    lost = session.ctx.transport.lost_peers

    def poll(seconds: float, until=lambda: False) -> bool:
        """should_stop() every 20 ms for ``seconds`` or until ``until()``; whether it said stop."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            if session.should_stop():
                return True
            time.sleep(0.02)
        return False

    try:
        assert not poll(0.3) and not lost()  # both answer their pings
        peers[0].close()
        assert not poll(grace + 0.5) and lost() == {1}  # one actor is left: the run goes on
        peers[1].close()
        assert not poll(2.0, until=lambda: lost() == {1, 2}) and lost() == {1, 2}
        every_lost = time.monotonic()
        assert poll(grace + 1.0)
        took = time.monotonic() - every_lost
        assert session.stop_reason == "all_peers_lost"
        assert grace - 0.05 <= took < grace + 0.5, took  # the clock starts in the call that saw rank 2 lost
        model = torch.nn.Linear(2, 2)
        summary = session.finish(session.stop_reason, [], model, torch.optim.SGD(model.parameters(), lr=0.1))
    finally:
        session.tracker.writer.close()
        hub.close()
    assert summary["stop_reason"] == "all_peers_lost" and set(summary["lost_ranks"]) == {"1", "2"}
    assert summary["checkpoint"] == "checkpoints/ckpt_0000000000.pt" and (tmp_path / summary["checkpoint"]).is_file()
    lines = [line for line in capsys.readouterr().out.splitlines() if "every peer is lost" in line]
    assert lines == [
        f"[learner] every peer is lost (ranks 1 (actor), 2 (actor)) for {grace:g} s: stopping with a checkpoint"
    ], lines


def test_every_apex_actor_lost_stops_though_a_replay_shard_lives(tmp_path, capsys):
    """The recipe's source roles (``Recipe.source_roles``): Ape-X's actors make the experience, so
    losing all of them stops the run while its replay shard still answers."""
    from distrl.cli.options import build_config, make_parser
    from distrl.runtime.context import RoleContext
    from distrl.roles.session import LearnerSession
    from distrl.transport.local import LocalHub

    argv = [
        "apex",
        "--experiment",
        "debug",
        "--logger",
        "none",
        "--run-dir",
        str(tmp_path),
        "--set",
        "run.peer_grace_s=0.2",
    ]
    cfg = build_config(make_parser().parse_args(argv))
    hub = LocalHub(4, num_threads=4)
    peers = {r: hub.endpoint(r) for r in (1, 2, 3)}
    for p in peers.values():
        p.serve("ping", lambda td: None)
    roles = {0: "learner", 1: "replay", 2: "actor", 3: "actor"}
    from distrl.recipes import get_recipe

    session = LearnerSession(RoleContext(cfg, hub.endpoint(0), 0, roles, tmp_path, get_recipe("apex")))
    try:
        assert session.peers.sources == [2, 3]
        peers[2].close()
        peers[3].close()
        deadline = time.monotonic() + 5.0
        while not session.should_stop() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert session.stop_reason == "all_peers_lost"
        assert 1 not in session.ctx.transport.lost_peers()  # the shard is alive
    finally:
        session.tracker.writer.close()
        hub.close()
    assert "every peer is lost (ranks 2 (actor), 3 (actor))" in capsys.readouterr().out


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(240)
def test_every_actor_killed_the_job_checkpoints_and_exits_4(tmp_path, jobs):
    run = tmp_path / "run"
    args = DEBUG + [
        "--run-dir",
        str(run),
        "--total-frames",
        "100000000",
        "--max-time-s",
        "600",
        "--set",
        f"run.peer_grace_s={GRACE_S:g}",
        "--nproc",
        "3",
    ]
    # without the fix the job idles until --max-time-s: the wait below fails it long before
    proc = jobs.train(args, env=faulty_env(tmp_path, KILL_BOTH), timeout=180)
    ended = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-4000:]
    killed = kill_times(tmp_path)
    assert set(killed) == {1, 2}, killed
    last_kill = max(killed.values())
    s = read_summary(run)
    assert s["stop_reason"] == "all_peers_lost", out[-3000:]
    assert {r: v["role"] for r, v in s["lost_ranks"].items()} == {"1": "actor", "2": "actor"}
    lines = [line for line in proc.stdout.splitlines() if "every peer is lost" in line]
    assert len(lines) == 1 and "ranks 1 (actor), 2 (actor)" in lines[0], lines

    from distrl.runtime.checkpoint import list_checkpoints, load_latest_checkpoint

    newest = list_checkpoints(run)[-1]
    assert s["checkpoint"] == newest.relative_to(run).as_posix()
    assert newest.stat().st_mtime > last_kill  # written on the way out, after the last actor died
    assert load_latest_checkpoint(run)["tracker"]["updates"] == s["learner_updates"] > 0

    detected = max(v["time"] for v in s["lost_ranks"].values()) - last_kill
    waited = s["wall_s"] - max(v["wall_s"] for v in s["lost_ranks"].values())  # the learner's own clock
    down = ended - last_kill
    print(
        f"\nevery actor SIGKILLed: the last one detected in {detected * 1000:.0f} ms, the learner stopped "
        f"{waited:.1f}s after (grace {GRACE_S:g}s), the job exited {down:.1f}s after the kill, status 4"
    )
    assert detected < 5.0
    assert GRACE_S <= waited and down < GRACE_S + 30


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): a fault test of 14 s or more
@pytest.mark.timeout(300)
def test_every_actor_lost_under_max_restarts_the_restart_resumes(tmp_path, jobs):
    run = tmp_path / "run"
    args = DEBUG + [
        "--run-dir",
        str(run),
        "--total-frames",
        "25000",  # the kills come at 12.8k (40 unrolls of 160 frames from each actor): 12k to resume into
        "--max-time-s",
        "600",
        "--set",
        f"run.peer_grace_s={GRACE_S:g}",
    ]
    cmd = train_cmd(args, nproc=3)
    cmd.insert(cmd.index("torch.distributed.run") + 1, "--max-restarts=1")
    job = jobs.start(cmd, env=faulty_env(tmp_path, KILL_BOTH))
    assert job.wait(240) == 0, job.tail(4000)
    out = job.output
    assert "[learner] every peer is lost (ranks 1 (actor), 2 (actor))" in out, out[-3000:]
    assert "[learner] resumed from update" in out, out[-3000:]
    resumed_at = int(out.split("[learner] resumed from update ")[1].split(",")[0])
    s = read_summary(run)
    assert resumed_at > 0 and s["stop_reason"] == "total_frames" and s["learner_updates"] > resumed_at
