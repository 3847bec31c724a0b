"""Both transport backends through one interface, and the rpc backend's failure modes.

The rpc tests run real rank processes (``tests/transport_worker.py``) on a free port; every
test kills and reaps what it started and checks that nothing is left.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import transport_worker as tw  # noqa: E402

from distrl.transport import LocalHub, PeerLostError, RpcTransport, TransportError  # noqa: E402
from helpers import ROOT, alive, descendants, free_port, process_table  # noqa: E402

WORKER = Path(__file__).parent / "transport_worker.py"
WAIT = 60  # seconds a rank may take to report: importing torch on 2 oversubscribed cores is slow
# Each test's own limit: the longest chain of inner waits (three ranks' results and exits) fits in it,
# so a failing wait is reported and the group killed before pytest-timeout fires.
LIMIT = 3 * (WAIT + 20) + 60


# ---------------------------------------------------------------- process groups for rpc


def child_pids() -> set[int]:
    """Live (or unreaped) children of this process."""
    return {pid for pid, (parent, _, _) in process_table().items() if parent == os.getpid()}


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Group:
    """Rank processes of one rpc scenario; ``ranks`` may leave some out (they never start)."""

    def __init__(self, scenario: str, world_size: int, ranks=None, env=None, torchrun_args=None):
        port, self.procs, self.errs, self.bufs = free_port(), {}, {}, {}
        base = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(world_size),
            PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            OMP_NUM_THREADS="1",
            **(env or {}),
        )
        for var in ("TORCHELASTIC_USE_AGENT_STORE", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"):
            base.pop(var, None)
        if torchrun_args is not None:  # one launcher; its ranks print to its stdout
            cmds = {
                0: [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    f"--nproc-per-node={world_size}",
                    *torchrun_args,
                    str(WORKER),
                    scenario,
                ]
            }
        else:
            cmds = {r: [sys.executable, str(WORKER), scenario] for r in (range(world_size) if ranks is None else ranks)}
        try:
            for r, cmd in cmds.items():
                self.errs[r] = tempfile.TemporaryFile()
                self.procs[r] = subprocess.Popen(
                    cmd,
                    env=dict(base, RANK=str(r)),
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=self.errs[r],
                )
        except BaseException:
            self.kill()
            raise

    def stderr(self, rank: int) -> str:
        self.errs[rank].seek(0)
        return self.errs[rank].read().decode(errors="replace")[-3000:]

    def wait_line(self, rank: int, prefix: str, timeout: float) -> str:
        """The next stdout line of ``rank`` starting with ``prefix`` (others are skipped)."""
        proc, deadline = self.procs[rank], time.monotonic() + timeout
        fd, buf = proc.stdout.fileno(), self.bufs.setdefault(rank, bytearray())
        while True:
            while b"\n" in buf:
                end = buf.index(b"\n")
                line = buf[:end].decode(errors="replace")
                del buf[: end + 1]
                if line.startswith(prefix):
                    return line[len(prefix) :].strip()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if select.select([fd], [], [], min(left, 0.5))[0]:
                chunk = os.read(fd, 65536)
                if not chunk:  # end of file: the rank exited
                    break
                buf += chunk
        raise AssertionError(f"rank {rank} printed no {prefix!r} (rc={proc.poll()}):\n{self.stderr(rank)}")

    def result(self, rank: int, timeout: float = WAIT) -> dict:
        return json.loads(self.wait_line(rank, "RESULT ", timeout))

    def kill(self) -> None:
        """SIGCONT and SIGKILL every process of the group, reap, and check that none is left."""
        below = set().union(*(descendants(p.pid) for p in self.procs.values()))
        for pid in [p.pid for p in self.procs.values() if p.poll() is None] + sorted(below):
            for sig in (signal.SIGCONT, signal.SIGKILL):  # a stopped process must not stay stopped
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        for proc in self.procs.values():
            proc.wait(10)
            proc.stdin.close()
            proc.stdout.close()
        for f in self.errs.values():
            f.close()
        deadline = time.monotonic() + 10
        while alive(below) and time.monotonic() < deadline:
            time.sleep(0.1)  # orphans are reaped by init
        mine = {p.pid for p in self.procs.values()}
        assert not (mine & child_pids()) | alive(below), f"left behind: {(mine & child_pids()) | alive(below)}"


@pytest.fixture
def groups(starts_processes):
    """Start groups with ``groups(...)``; all are killed, reaped and checked at teardown."""
    started: list[Group] = []

    def start(*args, **kw) -> Group:
        started.append(Group(*args, **kw))
        return started[-1]

    yield start
    for g in started:
        g.kill()


@pytest.fixture(scope="module")
def rpc_checks(starts_processes):
    """The shared checks, run once by rank 0 of a two-rank rpc group against rank 1."""
    g = Group("checks", 2)
    try:
        return g.result(0), g.result(1, 30)
    finally:
        g.kill()


# ---------------------------------------------------------------- both backends


@pytest.mark.parametrize("check", list(tw.CHECKS))
def test_shared_checks_local(check):
    hub = LocalHub(2)
    caller, callee = hub.endpoint(0), hub.endpoint(1)
    tw.serve_standard(callee, threading.Event(), queue.Queue())
    for t in (caller, callee):
        t.start()
    try:
        tw.CHECKS[check](caller, 1)
    finally:
        caller.close()
        callee.close()


@pytest.mark.timeout(LIMIT)
@pytest.mark.parametrize("check", list(tw.CHECKS))
def test_shared_checks_rpc(check, rpc_checks):
    driver, server = rpc_checks
    assert driver[check] == "ok", driver[check]
    assert driver["close_s"] < 10 and server["close_s"] < 10, (driver, server)
    if check == "roundtrip_td":
        print(f"rpc round trip, small TensorDict: {driver['rtt_ms']:.2f} ms")


@pytest.mark.timeout(30)
def test_local_mark_lost_fails_at_once():
    hub = LocalHub(2)
    a, b = hub.endpoint(0), hub.endpoint(1)
    b.serve("echo", lambda td: td)
    assert a.call_sync(1, "echo") is None
    a.mark_lost(1, "declared dead")
    fut = a.call(1, "echo")
    assert fut.done() and 1 in a.lost_peers()
    with pytest.raises(PeerLostError, match="declared dead"):
        fut.result()
    b.close()
    with pytest.raises(PeerLostError):
        hub.endpoint(0).call_sync(1, "echo")  # a closed rank is lost to everyone
    a.close()


@pytest.mark.timeout(30)
def test_rpc_guards_without_a_group(monkeypatch):
    with pytest.raises(ValueError):
        RpcTransport(2, 2)
    with pytest.raises(ValueError):
        RpcTransport(0, 2, timeout=0)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(TransportError, match="RANK"):
        RpcTransport.from_env()
    t = RpcTransport(0, 2)
    with pytest.raises(TransportError, match="not started"):
        t.call_sync(1, "echo")
    t.close()
    t.close()  # idempotent, also before start


# ---------------------------------------------------------------- rpc failure modes


@pytest.mark.timeout(LIMIT)
def test_rpc_sigkilled_peer_is_lost_fast(groups):
    g = groups("kill", 2)
    res = g.result(0)
    print(f"SIGKILL detected in {res['detect_s'] * 1e3:.0f} ms; close() with the dead peer took {res['close_s']:.2f} s")
    assert res["error"] == "PeerLostError" and res["detect_s"] < 5, res
    assert res["later_error"] == "PeerLostError" and res["later_done_at_once"], res
    assert res["lost"] == [1], res
    assert res["close_s"] < 10, res
    assert g.procs[0].wait(20) == 0


@pytest.mark.timeout(LIMIT)
def test_rpc_sigstopped_peer_times_out(groups):
    g = groups("stop", 2, env={"DISTRL_TEST_CLOSE_TIMEOUT": "2"})
    res = g.result(0)
    print(
        f"SIGSTOP noticed by a 1.0 s call timeout after {res['detect_s']:.2f} s; close() with the "
        f"stopped peer took {res['close_s']:.2f} s"
    )
    # not before the call timeout; after it by no more than a loaded machine's scheduling delay
    assert res["error"] == "CallTimeoutError" and 0.9 <= res["detect_s"] < 1.0 + 10, res
    assert res["lost"] == [] and res["resumed"] == "none", res
    assert res["close_s"] < 2 + 10, res
    assert g.procs[0].wait(20) == 0


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(LIMIT)
def test_rpc_start_names_a_rank_that_never_starts(groups):
    init_timeout = 8.0  # wide enough for the ranks that do start to import torch on 2 busy cores
    env = {"DISTRL_TEST_INIT_TIMEOUT": str(init_timeout)}
    # Both groups at once, to wait out one timeout: rank 2 of 3 missing, and rank 0 of 2.
    started = {2: groups("checks", 3, ranks=[0, 1], env=env), 0: groups("checks", 2, ranks=[1], env=env)}
    for missing, g in started.items():
        for r in g.procs:
            res = g.result(r)
            print(f"start() failed after {res['start_s']:.1f} s: {res['start_error']}")
            assert f"rank {missing} ({tw.ROLES[missing]}) did not start" in res["start_error"], res
            assert init_timeout * 0.9 <= res["start_s"] < init_timeout + 10, res
            assert g.procs[r].wait(20) == 0


@pytest.mark.timeout(LIMIT)
def test_rpc_start_survives_a_torchrun_restart(groups):
    # torchrun's shared store keeps the first round's rpc addresses, and a plain init_rpc of
    # the second round tries to connect to the dead ranks; start() must not.
    g = groups("restart", 2, torchrun_args=["--max-restarts=1"])
    res = g.result(0)
    assert res["restart"] == 1 and res["roundtrip_td"] == "ok", res
    assert g.procs[0].wait(30) == 0, g.stderr(0)


@pytest.mark.timeout(LIMIT)
def test_rpc_idle_agent_uses_no_cpu(groups):
    g = groups("idle", 2)
    g.wait_line(0, "READY", WAIT)
    time.sleep(0.5)  # let rank 1 finish start() too
    pids = [p.pid for p in g.procs.values()]
    before, start = [cpu_seconds(p) for p in pids], time.monotonic()
    time.sleep(3.0)
    span = time.monotonic() - start
    shares = [(cpu_seconds(p) - b) / span for p, b in zip(pids, before)]
    print("idle CPU share per rank: " + ", ".join(f"{100 * s:.1f}%" for s in shares))
    # a busy-polling agent burns ~100% of a core (facts: TensorPipe's default transports); an idle one
    # a few timer wake-ups. Its own CPU time, not wall time, so other load does not inflate it.
    assert max(shares) < 0.10, shares
    g.procs[0].stdin.write(b"go\n")
    g.procs[0].stdin.flush()
    for r in g.procs:
        assert g.result(r, 30)["close_s"] < 10
        assert g.procs[r].wait(20) == 0


@pytest.mark.timeout(LIMIT)
def test_rpc_many_concurrent_calls_do_not_deadlock(groups):
    g = groups("stress", 3)
    start = time.monotonic()
    res = g.result(0)
    print(f"3 ranks x 200 calls in flight, with a 1 s handler: {time.monotonic() - start:.1f} s")
    assert res["good"] == [201, 201, 201], res
    for r in g.procs:
        assert g.procs[r].wait(30) == 0, g.stderr(r)
