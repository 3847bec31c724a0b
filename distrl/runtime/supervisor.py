"""Each torchrun rank runs its role in a forked child, watched by the rank's own process.

Why: torchrun tears the whole job down when any of its workers dies, but an actor that dies
should cost the job one actor, not the run. So the process torchrun started only supervises:

- the child runs the role (transport, loop); the supervisor forwards SIGTERM, SIGINT, SIGHUP and
  SIGQUIT to it (torchrun passes each on to its ranks), and kills it :data:`SIGNAL_GRACE_S` later if
  it is still running (the learner checkpoints well within that);
- a non-critical role (an actor, an env worker) that dies is logged in one line and the rank
  exits 0, so torchrun lets the rest of the job go on;
- a critical role (the learner) that dies makes the rank exit 1, so torchrun stops the job, or
  restarts it under ``--max-restarts`` (the learner then resumes from its last checkpoint);
- when rank 0's role ends, its supervisor sets a key in torchrun's store; a supervisor whose
  child is still alive a grace period later (a stopped or wedged process) kills it, so a
  SIGSTOPped actor cannot hold the job open forever; a store that stops answering counts as that
  key set only after several failed checks over :data:`STORE_LOST_S` (its agent paused a few
  seconds is not the end of the job);
- a watchdog: a critical role's loop beats (:func:`beat`, a shared timestamp the learner session
  writes on every loop turn; a role that never beats, SF's inference, is not watched); a critical
  child silent for ``watchdog_s`` after its first beat (SIGSTOPped, deadlocked,
  a hung device call) is killed and the rank exits :data:`WATCHDOG_EXIT`, so torchrun ends the whole
  job (or restarts it under ``--max-restarts``) instead of every other role waiting on it for
  ever. A frozen actor needs no watchdog here: the learner's liveness pings declare it lost.

The child asks the kernel for SIGKILL when its supervisor dies (``PR_SET_PDEATHSIG``), so no
process outlives its rank; when the child ends, the supervisor removes any shared-memory files the
child created and had not unlinked yet (``distrl/data/shm.py``).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import threading
import time
from datetime import timedelta
from typing import Callable, Optional

from distrl.runtime.signals import STOP_SIGNALS

_PR_SET_PDEATHSIG = 1
WATCHDOG_EXIT = 5  #: a rank's exit status when its critical role was killed for making no progress
SIGNAL_GRACE_S = 30.0  #: how long a child may run on after a forwarded stop signal (torchrun's own bound too)

_beat = None  # in a supervised child: the shared timestamp its supervisor watches


def beat() -> None:
    """Tell this process's supervisor the role is making progress (a no-op when unsupervised)."""
    if _beat is not None:
        _beat.value = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine


def _done_key() -> str:
    return "distrl/{}/{}/rank0_done".format(
        os.environ.get("TORCHELASTIC_RUN_ID", "none"), os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    )


def child_main(target: Callable[[], int], shared_beat=None) -> None:
    """The body of a child process: dies with its parent (``PR_SET_PDEATHSIG``), takes the default
    handling of the stop signals (a role that checkpoints installs its own), runs ``target`` and
    exits with its status through ``os._exit``."""
    global _beat
    _beat = shared_beat
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: the supervisor's own cleanup still applies
        pass
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    os._exit(int(target() or 0))


STORE_LOST_CHECKS = 3  #: failed store checks in a row, at least ...
STORE_LOST_S = 10.0  #: ... this many seconds apart from the first, before the store counts as gone


class _Store:
    """A lazily connected client of torchrun's store (MASTER_ADDR:MASTER_PORT); never raises.

    The store lives in torchrun's agent on rank 0's node: one check that fails (the agent stopped
    or busy a few seconds, a dropped connection) is a hiccup, not the end of the job. The store
    counts as lost, and so rank 0 as done, only after :data:`STORE_LOST_CHECKS` failures in a row
    spanning :data:`STORE_LOST_S` or more; one answer forgets them. A check that has no answer in
    ``timeout_s`` is a failure: TCPStore's ``check`` ignores the store's timeout, so a stopped agent
    would block the supervisor (its watchdog, its forwarding of signals) for as long as it is
    stopped; each check runs in a thread of its own, and an unanswered one is waited on again at the
    next check rather than a second started.
    """

    def __init__(self, lost_checks: int = STORE_LOST_CHECKS, lost_s: float = STORE_LOST_S, timeout_s: float = 2.0):
        self._store = None
        self.lost_checks, self.lost_s, self.timeout_s = lost_checks, lost_s, timeout_s
        self.reached = False  # connected once: a store never reached is not yet up, not gone
        self.failures = 0  # failed or unanswered checks in a row
        self._failing_since: Optional[float] = None
        self._probe: Optional[threading.Thread] = None  # the check in flight
        self._answer: list = []  # what it found: [True/False], [an exception], [None]: not reached yet
        self.lost = False  # it was reachable and has not been for long: rank 0's node is gone

    def get(self):
        """The client, connected now if need be (raises if that fails)."""
        if self._store is None:
            import torch.distributed as dist

            self._store = dist.TCPStore(
                os.environ["MASTER_ADDR"],
                int(os.environ["MASTER_PORT"]),
                None,
                False,
                timedelta(seconds=self.timeout_s),
                wait_for_workers=False,
            )
            self.reached = True
        return self._store

    def _check(self, key: str, answer: list) -> None:
        try:
            answer.append(self.get().check([key]))
        except Exception as e:
            self._store = None  # the next check reconnects
            answer.append(e if self.reached else None)

    def _failed(self) -> bool:
        """One more failure in a row; the store is lost once they are enough and long enough."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        self.failures += 1
        if self.failures >= self.lost_checks and now - self._failing_since >= self.lost_s:
            self.lost = True
        return self.lost

    def is_set(self, key: str) -> bool:
        """Whether ``key`` is set, or the store is lost; waits at most ``timeout_s``."""
        if self.lost:
            return True
        if self._probe is None:
            self._answer = []
            self._probe = threading.Thread(target=self._check, args=(key, self._answer), daemon=True)
            self._probe.start()
        self._probe.join(self.timeout_s)
        if self._probe.is_alive():  # no answer yet: waited on again at the next check
            return self._failed()
        self._probe = None
        answer = self._answer[0] if self._answer else None
        if answer is None:  # not reached yet: not up, not gone
            return False
        if isinstance(answer, Exception):
            return self._failed()
        self.failures, self._failing_since = 0, None
        return bool(answer)

    def set(self, key: str) -> None:
        try:
            self.get().set(key, "1")
        except Exception:
            pass


def supervise(
    target: Callable[[], int], rank: int, role: str, critical: bool, grace_s: float, watchdog_s: float = 0.0
) -> int:
    """Run ``target`` in a forked child; return the exit status this rank reports to torchrun.

    ``grace_s``: how long a child may outlive the end of rank 0's role before it is killed.
    ``watchdog_s``: how long a critical child may go without a :func:`beat` (0: no watchdog).
    """
    ctx = multiprocessing.get_context("fork")
    shared_beat = ctx.Value("d", 0.0, lock=False)  # one float, written by one process; 0: never beat yet
    child = ctx.Process(target=child_main, args=(target, shared_beat), name=f"distrl-{role}-{rank}")
    child.start()
    frozen = False
    forwarded: list[float] = []

    def forward(signum, _frame):
        forwarded.append(time.monotonic())
        try:
            os.kill(child.pid, signal.SIGCONT)
            os.kill(child.pid, signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    store, done_since = _Store(), None
    try:
        while child.is_alive():
            child.join(0.5)
            if forwarded and time.monotonic() - forwarded[0] > SIGNAL_GRACE_S:  # an ignored stop signal: end it
                child.kill()
            silent = time.monotonic() - shared_beat.value
            if (
                critical
                and watchdog_s
                and shared_beat.value
                and silent > watchdog_s
                and child.is_alive()
                and not forwarded
            ):
                print(
                    f"[rank {rank}] watchdog: {role} made no progress for {silent:.0f}s (run.watchdog_s="
                    f"{watchdog_s:g}); killing it, the job ends with status {WATCHDOG_EXIT}",
                    flush=True,
                )
                frozen = True
                child.kill()  # SIGKILL ends a stopped process too
                child.join(5)
            if rank != 0 and child.is_alive():
                if done_since is None and store.is_set(_done_key()):
                    done_since = time.monotonic()
                if done_since is not None and time.monotonic() - done_since > grace_s:
                    print(
                        f"[rank {rank}] {role} still running {grace_s:.0f}s after the learner finished; killing it",
                        flush=True,
                    )
                    os.kill(child.pid, signal.SIGCONT)
                    child.kill()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if child.is_alive():
            child.kill()
            child.join(5)
        _remove_shared_memory(child.pid)
        if rank == 0:
            store.set(_done_key())
    return WATCHDOG_EXIT if frozen else _verdict(child.exitcode, rank, role, critical)


def _remove_shared_memory(pid: Optional[int]) -> None:
    """Shared-memory files the child created and had not yet unlinked (it died before every
    process mapped them: distrl/data/shm.py) go with it."""
    if pid is not None:
        from distrl.data.shm import remove_owned_by

        remove_owned_by(pid)


def _verdict(code: Optional[int], rank: int, role: str, critical: bool) -> int:
    """The rank's exit status once its child ended with ``code`` (negative: killed by that signal): a
    critical role's own status (1 for a signal), 0 for a non-critical role, which the job outlives."""
    if code == 0:
        return 0
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
    if critical:
        print(f"[rank {rank}] {role} ended with {how}: the job cannot go on without it", flush=True)
        return code if code and code > 0 else 1
    print(f"[rank {rank}] {role} died ({how}); the job goes on without it", flush=True)
    return 0
