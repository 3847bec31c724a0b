"""Shared fixtures: process-leak checks and a runner for launch/train.py in subprocesses."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "launch" / "train.py"


def descendants(pid: int) -> set[int]:
    """PIDs of every live descendant of ``pid`` (from /proc), zombies excluded."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


@pytest.fixture
def no_leaked_processes():
    """Fails the test if it leaves a child process of pytest behind (after a short grace)."""
    before = descendants(os.getpid())
    yield
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        leaked = descendants(os.getpid()) - before
        if not leaked:
            return
        time.sleep(0.2)
    raise AssertionError(f"processes left behind: {sorted(leaked)}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONUNBUFFERED": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"})
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    env.update(extra)
    return env


def run_train(args: list[str], nproc: int = 1, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run launch/train.py (under torchrun when ``nproc > 1``); returns the completed process."""
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={nproc}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", str(TRAIN), *args]
    else:
        cmd = [sys.executable, str(TRAIN), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env or child_env())


#: Keys every recipe's summary.json carries (the foundation issue's run directory).
SUMMARY_KEYS = {"recipe", "env", "world_size", "roles", "env_frames", "wall_s", "fps", "fps_running", "episodes",
                "return_mean_100", "eval_return_mean", "policy_lag_mean", "policy_lag_max", "learner_updates",
                "stop_reason", "target_reached", "min_return_after_target", "best_eval_return_mean", "evals"}


def read_summary(run_dir: Path, extra_keys: set[str] = frozenset()) -> dict:
    """``run_dir/summary.json``, checked to hold :data:`SUMMARY_KEYS` and ``extra_keys``."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    missing = (SUMMARY_KEYS | set(extra_keys)) - set(summary)
    assert not missing, f"summary.json lacks {sorted(missing)}"
    return summary


def hold_args(target: float = 475.0) -> list[str]:
    """Train options of a run judged on holding ``target``: it is measured, never obeyed."""
    return ["--target-return", str(target), "--set", "run.early_stop=false"]


def assert_held(summary: dict, target: float = 475.0, floor: float = 250.0) -> None:
    """Learning that holds: the training mean reached ``target``, never fell below ``floor``
    afterwards, and the last policy (the one a user keeps) evaluates greedily at ``target`` or more."""
    assert summary["stop_reason"] in ("max_time", "total_frames"), summary["stop_reason"]
    assert summary["target_reached"] is not None, f"never reached {target}: {summary['return_mean_100']}"
    assert summary["min_return_after_target"] >= floor, summary["min_return_after_target"]
    assert summary["eval_return_mean"] >= target, summary["eval_return_mean"]


@pytest.fixture(scope="session")
def impala_debug_run(tmp_path_factory) -> Path:
    """One finished run shared by the tests that read a run directory: impala ``debug`` (the toy
    env, 20k frames) in one process, about 15 s."""
    run = tmp_path_factory.mktemp("trained") / "impala-debug"
    proc = run_train(["impala", "--experiment", "debug", "--run-dir", str(run)], timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return run
