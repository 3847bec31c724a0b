"""Runs of ``distrl train`` as child processes, as ``distrl sweep`` and ``distrl compare`` start
them: their environment, their output into a log (and, line by line, to a progress display), and
stopping a whole tree (the launcher and its ranks, which torchrun puts in sessions of their own).
"""

from __future__ import annotations

import os
import platform
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

#: how long a stopped run gets between SIGTERM (checkpoint, summary, shutdown) and SIGKILL
STOP_GRACE_S = 30.0


def child_env() -> dict[str, str]:
    """This environment for a run: unbuffered output (progress lines as they come), and this
    distrl first on ``PYTHONPATH`` (a checkout's, installed or not, as ``--nproc``'s ranks get it)."""
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds distrl/
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (torchrun's ranks run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def stop_tree(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a run started with ``start_new_session=True``: SIGTERM to its process group (a launcher
    stops its ranks, a learner writes its summary), then SIGKILL to whatever of the tree is left."""
    tree = _descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    for pid in [proc.pid, *tree]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    proc.wait()


def _pump(stream, log, echo: Optional[Callable[[str], None]]) -> None:
    for line in stream:
        log.write(line)
        if echo is not None:
            echo(line.rstrip("\n"))


def run_logged(
    cmd: Sequence[str], log_path: Path, limit_s: float, echo: Optional[Callable[[str], None]] = None
) -> dict[str, Any]:
    """Run ``cmd`` to its end (``limit_s`` at most, then :func:`stop_tree`), all its output into
    ``log_path`` and, line by line, to ``echo``. Returns ``exit_code``, ``wall_s``, ``killed`` and
    ``cpu_s``: CPU seconds of the whole process tree (every rank), read from this process's reaped
    children, so run one at a time for it to be this command's alone."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    killed = False
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            list(map(str, cmd)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_env(),
            start_new_session=True,
            errors="replace",
        )
        reader = threading.Thread(target=_pump, args=(proc.stdout, log, echo), name="run-log", daemon=True)
        reader.start()
        try:
            proc.wait(limit_s)
        except subprocess.TimeoutExpired:
            killed = True
            stop_tree(proc)
        except BaseException:  # Ctrl-C: the run goes with us, never left training on its own
            stop_tree(proc, grace_s=5.0)
            raise
        finally:
            reader.join(10.0)
            proc.stdout.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "exit_code": proc.returncode,
        "wall_s": round(time.monotonic() - t0, 2),
        "killed": killed,
        "cpu_s": round(cpu, 2),
    }


def machine() -> str:
    """This machine in a few words: cores, CPU model, GPU if any."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown CPU",
    )
    import torch

    gpu = f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no GPU"
    return f"{os.cpu_count()} cores ({model}){gpu}, torch {torch.__version__}, Python {platform.python_version()}"
