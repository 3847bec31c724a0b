"""Who can get in: each test injects one way another user, another launch or a crafted file reaches
a run, and checks it is kept out (docs/reliability.md, "Who can reach a run").

- shared memory, checkpoints and the run directory are owner-only under a permissive umask (0);
- a second launch on a run directory a live launch holds, ``--resume`` or not, stops in one line
  naming the holder's pid and host, writes nothing, and goes ahead once the holder is gone;
- a checkpoint that names code to run is refused (weights-only), not executed.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import time
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from distrl.runtime.checkpoint import (
    DamagedCheckpoints,
    checkpoint_dir,
    load_latest_checkpoint,
    resume_checkpoint,
    rng_state,
    save_best,
    save_checkpoint,
)
from distrl.data import shm
from distrl.runtime.job import LOCK_NAME, RunDirBusy, claim_run_dir, ensure_run_dir_free
from distrl.recipes.sf import doorbell
from distrl.nn.trained_policy import load_run

from helpers import child_env


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask():
    """The most permissive umask (0) for the test: what is owner-only is so by its own doing."""
    old = os.umask(0)
    yield
    os.umask(old)


# ---- owner-only files --------------------------------------------------------------------------------


def test_shared_memory_and_its_doorbells_are_owner_only(tmp_path, open_umask):
    td, path = shm.create(
        TensorDict({"obs": torch.zeros(4, 3), ("next", "done"): torch.zeros(4, dtype=torch.bool)}, [4]),
        "sec",
        root=tmp_path,
    )
    try:
        doorbell.make(path, learner=0, inference_ranks=[1], worker_ranks=[2])
        modes = {p.relative_to(path).as_posix(): mode(p) for p in path.rglob("*")}
        assert mode(path) == 0o700
        assert modes and all(m == (0o700 if (path / p).is_dir() else 0o600) for p, m in modes.items()), modes
    finally:
        shm.unlink(path)


def test_checkpoints_are_owner_only(tmp_path, open_umask):
    save_checkpoint(tmp_path, 1, {"step": 1})
    save_best(tmp_path, {"step": 1})
    folder = checkpoint_dir(tmp_path)
    assert mode(folder) == 0o700
    assert {p.name: mode(p) for p in folder.iterdir()} == {"ckpt_0000000001.pt": 0o600, "best.pt": 0o600}


# ---- checkpoints are read weights-only ----------------------------------------------------------------


class _RunsCode:
    """What a crafted checkpoint holds: unpickling it creates a file (it could run anything)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def test_a_checkpoint_that_names_code_is_refused_not_run(tmp_path):
    marker = tmp_path / "code-ran"
    save_checkpoint(tmp_path, 1, {"step": 1, "rng": rng_state(), "model": torch.nn.Linear(2, 2).state_dict()})
    save_checkpoint(tmp_path, 2, {"step": 2, "x": _RunsCode(marker)})
    state = load_latest_checkpoint(tmp_path)  # the crafted newest is skipped like a damaged one
    assert not marker.exists(), "loading a checkpoint ran code"
    assert state["step"] == 1 and state["rng"]["numpy"][0] == "MT19937"  # numpy's RNG state is allowed
    (checkpoint_dir(tmp_path) / "ckpt_0000000001.pt").unlink()
    with pytest.raises(DamagedCheckpoints):  # --resume: one line, exit 2, nothing run
        resume_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="does not load as a distrl checkpoint"):  # export-policy --checkpoint FILE
        load_run(tmp_path, str(checkpoint_dir(tmp_path) / "ckpt_0000000002.pt"))
    assert not marker.exists(), "loading a checkpoint ran code"


# ---- one launch per run directory -----------------------------------------------------------------------


def test_a_second_claim_names_the_holder_and_a_released_lock_is_free(tmp_path, open_umask):
    run = tmp_path / "run"
    with claim_run_dir(run):
        assert mode(run) == 0o700 and mode(run / LOCK_NAME) == 0o600
        for attempt in (lambda: ensure_run_dir_free(run), lambda: claim_run_dir(run).__enter__()):
            with pytest.raises(RunDirBusy) as busy:
                attempt()
            message = str(busy.value)
            assert f"pid {os.getpid()} on host {socket.gethostname()}" in message and "\n" not in message, message
    ensure_run_dir_free(run)  # released: free again
    with claim_run_dir(run):
        pass


HOLDER = """
import sys, time
from distrl.runtime.job import claim_run_dir
with claim_run_dir(sys.argv[1]):
    print("holding", flush=True)
    time.sleep(600)  # until the test kills it
"""


def test_a_second_launch_on_a_held_run_dir_fails_in_one_line_then_resumes(
    tmp_path, jobs, in_process, capsys, open_umask
):
    """The first launch (a process holding the lock as rank 0 does) is alive: a second one, even
    with ``--resume``, stops in one line naming its pid and host, exit 2, nothing written. Once the
    first is SIGKILLed (its lock dropped by the kernel, its lock file left behind), the resume runs,
    and everything it writes is owner-only under umask 0."""
    run = tmp_path / "run"
    run.mkdir()
    args = ["impala", "--experiment", "debug", "--set", "run.logger=none", "--total-frames", "200"]
    assert in_process([*args, "--print-config"]) == 0
    (run / "config.json").write_text(capsys.readouterr().out)
    os.chmod(run, 0o755)  # as a run directory made before distrl made them owner-only
    holder = jobs.start([sys.executable, "-c", HOLDER, run], env=child_env())
    holder.wait_for("holding", timeout=60)
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}

    start = time.monotonic()
    second = jobs.train([*args, "--resume", "--run-dir", run], timeout=120)
    took = time.monotonic() - start
    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stderr.count("\n") == 1 and second.stderr.startswith("error: "), second.stderr
    assert f"in use by pid {holder.pid} on host {socket.gethostname()}" in second.stderr, second.stderr
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before  # nothing written
    print(f"second launch refused in {took:.1f} s (interpreter start included)")

    holder.kill()
    assert in_process([*args, "--resume", "--run-dir", str(run)]) == 0
    assert os.umask(0) == 0  # main gave the caller's umask back
    assert mode(run) == 0o700
    written = [p for p in run.rglob("*") if p.is_file() and p.name not in before]  # config.json keeps its mode:
    assert {"summary.json", "best.pt", "metrics.jsonl"} <= {p.name for p in written}  # the directory guards it
    assert {p.relative_to(run).as_posix(): mode(p) for p in written if mode(p) != 0o600} == {}
    assert mode(run / LOCK_NAME) == 0o600
    assert mode(checkpoint_dir(run)) == 0o700
