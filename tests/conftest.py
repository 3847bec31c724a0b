"""Fixtures and the two tiers.

A test is ``integration`` when it requests a fixture of :data:`INTEGRATION_FIXTURES` (directly or
through another fixture): it starts processes, trains, or opens a process group. The marker is
applied here, from what the test uses, never by hand; ``pytest -m "not integration"`` runs the
rest, the quick tier. In that tier a test that starts a process, opens a process group or calls
the runner without such a fixture fails, naming the fixture to request, so the marker cannot lie.

A test marked ``long`` by hand (a load test; a fault test of 14 s or more in a suite run; a test
of 10 s or more whose path a quicker test in the suite also covers) is skipped unless
``DISTRL_LOAD=1``: the suite stays under 20 minutes on 2 cores, and docs/reliability.md quotes the
long tier's last run (``DISTRL_LOAD=1 python -m pytest -m long``).

Every test, in both tiers, leaves no process, no thread and no shared-memory file behind, and
gets its signal handlers back (an in-process learner installs a SIGTERM handler).
"""

from __future__ import annotations

import multiprocessing.process
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

# MuJoCo renders nothing in these tests. Importing it (torchrl does when it is present) picks a GL
# backend, and gymnasium's MuJoCo envs import glfw, whose library search starts a process to probe
# each candidate's version, which the quick tier's guard refuses: no GL backend for mujoco, and
# glfw pointed straight at the library its wheel bundles (loaded in-process, no probe).
os.environ.setdefault("MUJOCO_GL", "disable")


def _bundled_glfw() -> None:
    import importlib.util

    spec = importlib.util.find_spec("glfw")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return
    lib = Path(spec.submodule_search_locations[0]) / "x11" / "libglfw.so"
    if lib.is_file():
        os.environ.setdefault("PYGLFW_LIBRARY", str(lib))


_bundled_glfw()

from helpers import TEST_EXTRA_MODULES, Jobs, alive, descendants, in_ci, live_threads, read_summary, shm_files  # noqa: E402 (after the GLFW setup above)


def _importorskip_or_fail(importorskip):
    """``pytest.importorskip`` that fails instead of skipping for a module of pyproject's test extra:
    CI installs ``.[test]``, so there a missing one is a broken install, not an optional feature."""

    def wrapped(modname: str, *args, **kwargs):
        try:
            return importorskip(modname, *args, **kwargs)
        except pytest.skip.Exception as e:
            if modname.partition(".")[0] not in TEST_EXTRA_MODULES.values():
                raise
            reason = e.msg
        pytest.fail(f"{modname} comes with pyproject's test extra, which CI installs; here: {reason}", pytrace=False)

    return wrapped


if in_ci():  # before any test module imports: their importorskip calls run at collection
    pytest.importorskip = _importorskip_or_fail(pytest.importorskip)

#: fixtures that make a test ``integration``, and what each is for
INTEGRATION_FIXTURES = {
    "jobs": "starts commands (launch/train.py, torchrun, scripts) in their own process groups",
    "in_process": "trains through distrl.train.main in this process",
    "training": "runs a learning loop in this process by other means (a role's run(), a learner loop)",
    "process_group": "opens a torch.distributed process group or rpc in this process",
    "no_leaked_processes": "starts processes through a library (TorchRL collectors, multiprocessing)",
    "starts_processes": "a module- or session-scoped fixture that starts processes requests it",
    "impala_debug_run": "reads a finished run of impala's debug experiment",
}
SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCONT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCHLD,
)


def pytest_sessionstart(session):
    # multiprocessing's resource tracker is one helper process per interpreter, started by the first
    # library that needs it and kept for good: start it now, so no test is blamed for it.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


#: why a ``long`` test is skipped when ``DISTRL_LOAD`` is unset
LONG_TIER = "the long tier: DISTRL_LOAD=1 runs it (docs/reliability.md quotes its last run)"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by markers
def pytest_collection_modifyitems(items):
    for item in items:
        if INTEGRATION_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        if item.get_closest_marker("long") and not os.environ.get("DISTRL_LOAD"):
            item.add_marker(pytest.mark.skip(reason=LONG_TIER))


# ---- what every test gets -------------------------------------------------------------------------


def _refuse(what: str, fixture: str):
    def refuse(*_a, **_k):
        raise RuntimeError(
            f"a quick-tier test {what}: request the `{fixture}` fixture "
            f"({INTEGRATION_FIXTURES[fixture]}), which marks it integration"
        )

    return refuse


@pytest.fixture(autouse=True)
def _tier_guard(request, monkeypatch):
    """In a test without an integration fixture, starting a process, opening a process group or
    running a recipe raises."""
    if request.node.get_closest_marker("integration"):
        yield
        return
    import torch.distributed as dist
    import torch.distributed.rpc as rpc

    import distrl.cli.runner

    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("started a process", "jobs"))
    monkeypatch.setattr(
        multiprocessing.process.BaseProcess, "start", _refuse("started a process", "no_leaked_processes")
    )
    monkeypatch.setattr(dist, "init_process_group", _refuse("opened a process group", "process_group"))
    monkeypatch.setattr(rpc, "init_rpc", _refuse("started rpc", "process_group"))
    monkeypatch.setattr(distrl.cli.runner, "run", _refuse("ran a recipe", "in_process"))
    yield


@pytest.fixture(autouse=True)
def _nothing_left_behind():
    """Signal handlers restored; TorchRL's process-wide exploration mode as it was (a leaked "random" makes
    every TorchRL actor built after it sample: load_policy's greedy play); no new thread, child process or
    shared-memory file after a grace."""
    from tensordict.nn.probabilistic import _interaction_type

    handlers, mode = {s: signal.getsignal(s) for s in SIGNALS}, _interaction_type.get_mode()
    threads, children, shm = live_threads(), descendants_of_pytest(), shm_files()
    yield
    for s, h in handlers.items():
        signal.signal(s, h)
    left_mode = _interaction_type.get_mode()
    _interaction_type.set_mode(mode)  # the next tests start clean either way
    assert left_mode == mode, f"TorchRL's exploration mode left at {left_mode} (was {mode})"
    deadline = time.monotonic() + 10
    while True:
        left_threads = {t for t in live_threads() - threads if not t.name.startswith("job-watch")}
        left_children, left_shm = descendants_of_pytest() - children, shm_files() - shm
        if not (left_threads or left_children or left_shm) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left_children, f"processes left behind: {sorted(left_children)}"
    assert not left_shm, f"shared memory left behind: {sorted(map(str, left_shm))}"
    assert not left_threads, f"threads left behind: {sorted(t.name for t in left_threads)}"


def descendants_of_pytest() -> set[int]:
    return descendants(os.getpid())


# ---- integration fixtures -------------------------------------------------------------------------


@pytest.fixture
def jobs(tmp_path_factory):
    j = Jobs(tmp_path_factory.mktemp("jobs"))
    yield j
    j.close()


@pytest.fixture
def in_process():
    """``train(argv) -> exit status``: distrl.train.main in this process."""
    from distrl.train import main

    return main


@pytest.fixture
def training():
    """Marks a test that runs a learning loop in this process."""


@pytest.fixture(scope="session")
def starts_processes():
    """Marks the tests that use a wider-scoped fixture which starts processes."""


@pytest.fixture
def process_group():
    """Marks a test that opens a torch.distributed process group or rpc in this process."""


@pytest.fixture
def no_leaked_processes():
    """For a test whose library starts processes: none of them may outlive it (checked by the
    autouse fixture; this one kills stragglers so one test's leak cannot hang the next)."""
    before = descendants(os.getpid())
    yield
    deadline = time.monotonic() + 10
    while (left := alive(descendants(os.getpid()) - before)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind: {sorted(left)}"


@pytest.fixture(scope="session")
def impala_debug_run(tmp_path_factory) -> Path:
    """One finished run shared by the tests that read a run directory: impala ``debug`` (the toy
    env, 20k frames) in one process, about 5-15 s. Its stdout is kept beside it, in ``stdout``.
    Tests only read it."""
    run = tmp_path_factory.mktemp("trained") / "impala-debug"
    j = Jobs(tmp_path_factory.mktemp("jobs"))
    try:
        proc = j.train(["impala", "--experiment", "debug", "--run-dir", str(run)], timeout=120)
    finally:
        j.close()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    read_summary(run)
    (run.parent / "stdout").write_text(proc.stdout)
    return run
