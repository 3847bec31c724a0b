"""Checks shared by both transport backends, and the rank process of the rpc tests.

Imported by ``test_transport.py`` for the in-process backend; run as
``python tests/transport_worker.py SCENARIO`` (with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set) for the rpc backend, one process per rank. Each rank prints one line
``RESULT {json}`` for the test to read.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import statistics
import sys
import threading
import time

import torch
from tensordict import TensorDict

from distrl.transport import CallTimeoutError, RemoteError, RpcTransport, Transport

ROLES = {0: "driver", 1: "server", 2: "actor"}


def nested_td() -> TensorDict:
    """A TensorDict with nested keys, several dtypes and a nested batch size of its own."""
    return TensorDict(
        {
            "obs": torch.randn(4, 3),
            "done": torch.tensor([True, False, False, True]),
            "next": {"obs": torch.randn(4, 3), "reward": torch.arange(4, dtype=torch.float64)},
            "traj": TensorDict({"action": torch.randint(0, 5, (4, 2), dtype=torch.int16)}, [4, 2]),
        },
        batch_size=[4],
    )


def serve_standard(t: Transport, stop: threading.Event, reports: "queue.Queue") -> None:
    """The handlers every check and scenario calls."""

    def boom(td):
        raise ValueError("boom from the handler")

    def sleep(td):
        time.sleep(float(td["s"]))
        return td

    t.serve("echo", lambda td: td)
    t.serve("drop", lambda td: None)
    t.serve("boom", boom)
    t.serve("sleep", sleep)
    t.serve("pid", lambda td: TensorDict({"pid": torch.tensor(os.getpid())}, []))
    t.serve("stop", lambda td: stop.set())
    t.serve("report", lambda td: reports.put(td))


def check_roundtrip_td(t: Transport, dst: int) -> None:
    td = nested_td()
    out = t.call_sync(dst, "echo", td, timeout=10)
    assert isinstance(out, TensorDict), type(out)
    assert out.batch_size == td.batch_size and out["traj"].batch_size == torch.Size([4, 2])
    keys = set(td.keys(True, True))
    assert set(out.keys(True, True)) == keys, (sorted(map(str, out.keys(True, True))), sorted(map(str, keys)))
    for k in keys:
        assert out[k].dtype == td[k].dtype and torch.equal(out[k], td[k]), k


def check_roundtrip_none(t: Transport, dst: int) -> None:
    assert t.call_sync(dst, "echo", None, timeout=10) is None
    assert t.call_sync(dst, "drop", nested_td(), timeout=10) is None


def check_remote_error(t: Transport, dst: int) -> None:
    try:
        t.call_sync(dst, "boom", nested_td(), timeout=10)
    except RemoteError as e:
        assert "ValueError" in str(e) and "boom from the handler" in str(e), str(e)
    else:
        raise AssertionError("no RemoteError")
    check_roundtrip_none(t, dst)  # the peer serves on


def check_unknown_method(t: Transport, dst: int) -> None:
    try:
        t.call_sync(dst, "no_such_method", None, timeout=10)
    except RemoteError as e:
        assert "no_such_method" in str(e), str(e)
    else:
        raise AssertionError("no RemoteError")


def check_timeout(t: Transport, dst: int) -> float:
    start = time.monotonic()
    try:
        t.call_sync(dst, "sleep", TensorDict({"s": torch.tensor(3.0)}, []), timeout=0.5)
    except CallTimeoutError:
        elapsed = time.monotonic() - start
    else:
        raise AssertionError("no CallTimeoutError")
    assert 0.45 <= elapsed < 2.0, elapsed
    assert dst not in t.lost_peers()  # slow is not dead
    check_roundtrip_none(t, dst)
    return elapsed


CHECKS = {
    "roundtrip_td": check_roundtrip_td,
    "roundtrip_none": check_roundtrip_none,
    "remote_error": check_remote_error,
    "unknown_method": check_unknown_method,
    "timeout": check_timeout,
}


def _error_name(fut, wait: float = 30.0) -> str:
    try:
        fut.result(wait)
        return "none"
    except Exception as e:
        return type(e).__name__


def scenario_checks(t: Transport) -> dict:
    out = {}
    for name, check in CHECKS.items():
        try:
            check(t, 1)
            out[name] = "ok"
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
    small = TensorDict({"x": torch.zeros(8)}, [8])
    times = []
    for _ in range(50):
        start = time.perf_counter()
        t.call_sync(1, "echo", small)
        times.append(time.perf_counter() - start)
    out["rtt_ms"] = 1e3 * statistics.median(times)
    return out


def scenario_kill(t: Transport) -> dict:
    pid = int(t.call_sync(1, "pid")["pid"])
    fut = t.call(1, "sleep", TensorDict({"s": torch.tensor(8.0)}, []), timeout=20)
    time.sleep(0.3)
    start = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    err = _error_name(fut)
    detect = time.monotonic() - start
    start = time.monotonic()
    later = t.call(1, "echo", None)
    done_at_once = later.done()
    return {
        "error": err,
        "detect_s": detect,
        "later_error": _error_name(later),
        "later_done_at_once": done_at_once,
        "later_s": time.monotonic() - start,
        "lost": sorted(t.lost_peers()),
    }


def scenario_stop(t: Transport) -> dict:
    pid = int(t.call_sync(1, "pid")["pid"])
    os.kill(pid, signal.SIGSTOP)
    start = time.monotonic()
    err = _error_name(t.call(1, "echo", None, timeout=1.0))
    detect = time.monotonic() - start
    lost = sorted(t.lost_peers())
    os.kill(pid, signal.SIGCONT)
    resumed = _error_name(t.call(1, "echo", None, timeout=10))
    os.kill(pid, signal.SIGSTOP)  # stopped again for close(); the test reaps it
    return {"error": err, "detect_s": detect, "lost": lost, "resumed": resumed}


def scenario_stress(t: Transport, reports: "queue.Queue") -> dict:
    """Every rank sends 100 calls to each peer at once while a slow handler holds a thread."""
    peers = [r for r in range(t.world_size) if r != t.rank]
    slow = t.call(peers[0], "sleep", TensorDict({"s": torch.tensor(1.0)}, []), timeout=30)
    futs = [
        (r, i, t.call(r, "echo", TensorDict({"i": torch.tensor([i, t.rank])}, [2]), timeout=60))
        for i in range(100)
        for r in peers
    ]
    good = sum(int(f.result(60)["i"][0]) == i for _, i, f in futs) + (slow.result(30) is not None)
    if t.rank != 0:
        t.call_sync(0, "report", TensorDict({"good": torch.tensor(good)}, []), timeout=30)
        return {"good": good}
    totals = [good] + [int(reports.get(timeout=60)["good"]) for _ in peers]
    return {"good": totals}


def main() -> None:
    scenario = sys.argv[1]
    init_timeout = float(os.environ.get("DISTRL_TEST_INIT_TIMEOUT", "60"))
    t = RpcTransport.from_env(timeout=10.0, init_timeout=init_timeout, role_names=ROLES)
    stop, reports = threading.Event(), queue.Queue()
    serve_standard(t, stop, reports)
    result: dict = {}
    start = time.monotonic()
    try:
        t.start()
    except Exception as e:
        result = {"start_error": str(e), "start_s": time.monotonic() - start}
    else:
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        if scenario == "restart" and restart == 0:  # rank 1 fails, torchrun restarts the group
            if t.rank == 1:
                os._exit(3)
            time.sleep(60)
        if scenario == "stress":
            result = scenario_stress(t, reports)
        elif t.rank == 0 and scenario == "idle":
            print("READY", flush=True)
            sys.stdin.readline()
        elif t.rank == 0:
            run = {"checks": scenario_checks, "restart": scenario_checks, "kill": scenario_kill, "stop": scenario_stop}[
                scenario
            ]
            result = dict(run(t), restart=restart)
        if t.rank == 0:
            for r in range(1, t.world_size):
                if r not in t.lost_peers() and scenario != "stop":  # close() meets a stopped peer
                    t.call(r, "stop", timeout=5)
        else:
            stop.wait(150)
        start = time.monotonic()
        t.close(timeout=float(os.environ.get("DISTRL_TEST_CLOSE_TIMEOUT", "10")))
        result["close_s"] = time.monotonic() - start
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
