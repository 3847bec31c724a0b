"""What a worker does when its environment raises: the one policy every env-stepping role shares.

After each failure the role drops the partial data of the failed step or unroll, and
:meth:`EnvRecovery.failed` counts the failure, prints one line (who, the env id, the exception),
sleeps an exponential backoff (``base_s`` doubling up to ``cap_s``) and returns: the role then
recreates its env and goes on. A streak of ``reset_after`` successes (:meth:`EnvRecovery.succeeded`)
forgets the failures in a row, so the backoff starts from ``base_s`` again. The
``max_failures``-th failure in a row raises :class:`EnvFailedError` instead, whose one line names
the env id, the count and the last exception: the rank dies, and the learner's liveness check
declares it lost and goes on without it (or stops once every peer is lost, ``run.peer_grace_s``).
An env that fails now and then is recovered from forever; one that is broken is not retried forever.

An env that hangs instead (a step that never returns: a dead emulator pipe, a simulator waiting on
a licence server) raises nothing, and the worker's transport threads still answer the learner's
pings, so liveness alone never sees it. :class:`StepWatch` bounds each step
(``run.env_step_timeout_s``): a thread of the worker's own ends the process in one line once a step
has run that long, so the learner's next ping fails and the rank is declared lost like a dead one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

ENV_HUNG_EXIT = 6  #: a worker's exit status when its env step outlived ``run.env_step_timeout_s``


class EnvFailedError(RuntimeError):
    """An env failed ``run.env_max_failures`` times in a row: its worker gives up."""


class EnvRecovery:
    """Failure count, backoff and give-up for the envs of one worker (``env_id``); see the module docstring."""

    def __init__(
        self,
        env_id: str,
        max_failures: int,
        base_s: float = 0.1,
        cap_s: float = 5.0,
        reset_after: int = 1,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if max_failures < 1 or reset_after < 1:
            raise ValueError(f"max_failures and reset_after must be >= 1, got {max_failures} and {reset_after}")
        self.env_id, self.max_failures, self.base_s, self.cap_s = env_id, max_failures, base_s, cap_s
        self.reset_after, self.sleep = reset_after, sleep
        self.failures = 0  #: failures over the run (the ``env_errors`` counter)
        self.in_a_row = 0  #: failures since the last streak of ``reset_after`` successes
        self._streak = 0  # successes since the last failure

    def delay_s(self) -> float:
        """The backoff before the next re-creation: ``base_s * 2**(in_a_row - 1)``, at most ``cap_s``."""
        return min(self.base_s * 2 ** max(self.in_a_row - 1, 0), self.cap_s)

    def succeeded(self) -> None:
        """One good step or unroll; ``reset_after`` in a row forget the failures in a row."""
        self._streak += 1
        if self._streak >= self.reset_after:
            self.in_a_row = 0

    def failed(self, error: BaseException, who: str) -> None:
        """Count ``error``; raise :class:`EnvFailedError` on the ``max_failures``-th in a row, else
        say so in one line and sleep the backoff (the caller then recreates the env)."""
        self.failures += 1
        self.in_a_row += 1
        self._streak = 0
        what = f"{type(error).__name__}: {' '.join(str(error).split())}"  # one line, whatever the env said
        if self.in_a_row >= self.max_failures:
            raise EnvFailedError(
                f"[{who}] env {self.env_id} failed {self.in_a_row} times in a row "
                f"(run.env_max_failures={self.max_failures}), giving up; last: {what}"
            ) from error
        delay = self.delay_s()
        print(
            f"[{who}] environment {self.env_id} failed ({what}); recreating it and dropping the partial "
            f"trajectory (failure {self.in_a_row} of {self.max_failures} in a row, after {delay:.1f}s)",
            flush=True,
        )
        self.sleep(delay)


class StepWatch:
    """``with watch:`` around each env step: a step running past ``timeout_s`` ends the process.

    The watching thread starts with the first step; it needs the GIL, which a hung step blocked in
    a system call (a pipe, a socket, a sleep) or in Python code gives up. A step hung in C code that
    holds the GIL stops the transport threads too, and the learner's pings declare the rank lost.
    ``timeout_s`` 0: no watch. ``exit`` is ``os._exit`` (tests pass their own).
    """

    def __init__(self, env_id: str, timeout_s: float, who: str, exit: Callable[[int], None] = os._exit):
        self.env_id, self.timeout_s, self.who, self._exit = env_id, timeout_s, who, exit
        self.since: float | None = None  # the running step's start (monotonic), None between steps
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()  # set: the thread ends (a new one starts at the next step)

    def __enter__(self) -> StepWatch:
        if self.timeout_s and self._thread is None:
            self._closed = threading.Event()
            self._thread = threading.Thread(target=self._watch, name="distrl-env-step-watch", daemon=True)
            self._thread.start()
        self.since = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.since = None

    def close(self) -> None:
        """Stop watching (the worker closes its envs); a later step starts a new watch."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _watch(self) -> None:
        poll = min(1.0, self.timeout_s / 4)
        while not self._closed.wait(poll):
            since = self.since
            if since is not None and time.monotonic() - since > self.timeout_s:
                print(
                    f"[{self.who}] env {self.env_id}: a step did not return in {self.timeout_s:g}s "
                    f"(run.env_step_timeout_s); leaving, so the learner declares this rank lost",
                    flush=True,
                )
                self._exit(ENV_HUNG_EXIT)
                return
