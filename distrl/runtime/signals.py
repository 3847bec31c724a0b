"""The signals that ask a run to stop, and the one that says this process was paused.

A scheduler ends an allocation with SIGTERM; a user presses Ctrl-C (SIGINT); a closed terminal or
ssh session sends SIGHUP; torchrun forwards each of these and SIGQUIT to its ranks. All four mean the
same to distrl: checkpoint, tell the others, free shared memory, exit with ``128 + signal``.
:class:`StopSignals` turns each into a flag (a handler only flags: the loop acts on it at its next
check, in an evaluation's next step or before and after a checkpoint).

SIGCONT is the other one: a process that was stopped (SIGSTOP, a debugger, a paused job) gets it
when it goes on. Calls it sent before the pause may have timed out while it could not read their
replies; :meth:`StopSignals.paused_since` tells such a timeout from a peer that did not answer.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Optional

#: the signals that stop a run with a checkpoint (SIGTERM first: the scheduler's)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
#: a SIGINT this long after the first stop signal is a second Ctrl-C: ``KeyboardInterrupt`` at once (sooner,
#: it is the same Ctrl-C arriving twice: from the terminal and forwarded by the rank's supervisor)
REPEAT_S = 1.0


def exit_status(reason: Optional[str]) -> Optional[int]:
    """``128 + N`` for a stop reason naming a stop signal (``"sigint"`` -> 130), else ``None``."""
    for sig in STOP_SIGNALS:
        if reason == sig.name.lower():
            return 128 + int(sig)
    return None


class StopSignals:
    """Flags for :data:`STOP_SIGNALS` and the time of the last SIGCONT, once :meth:`install` ed.

    ``received`` is the first stop signal, ``at`` its ``time.monotonic()``. Later ones change nothing
    (Ctrl-C in a terminal reaches a rank both directly and through its supervisor), but a SIGINT more
    than :data:`REPEAT_S` after the first raises ``KeyboardInterrupt``: a second Ctrl-C stops a run
    whose checkpoint the user will not wait for.
    """

    def __init__(self):
        self.received: Optional[signal.Signals] = None
        self.at: Optional[float] = None
        self.continued_at = float("-inf")  #: ``time.monotonic()`` of the last SIGCONT
        self.event = threading.Event()  #: set with ``received``, for threads that wait on it
        self._previous: dict[int, object] = {}

    def install(self, cont: bool = True) -> bool:
        """Take the stop signals (and SIGCONT, with ``cont``); only the main thread can, and only it
        returns ``True``. :meth:`restore` gives the previous handlers back."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in STOP_SIGNALS + ((signal.SIGCONT,) if cont else ()):
            self._previous[sig] = signal.signal(sig, self._handle)
        return True

    def restore(self) -> None:
        """The handlers :meth:`install` replaced, back (a run inside someone's process leaves theirs)."""
        if threading.current_thread() is threading.main_thread():
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self._previous.clear()

    def _handle(self, signum: int, _frame) -> None:
        now = time.monotonic()
        if signum == signal.SIGCONT:
            self.continued_at = now
        elif self.received is None:
            self.received, self.at = signal.Signals(signum), now
            self.event.set()
        elif signum == signal.SIGINT and now - self.at > REPEAT_S:  # Ctrl-C again: the user will not wait
            raise KeyboardInterrupt

    @property
    def reason(self) -> Optional[str]:
        """The stop reason of the signal received (``"sigterm"``, ``"sigint"``...), or ``None``."""
        return self.received.name.lower() if self.received is not None else None

    def paused_since(self, t: float) -> bool:
        """Was this process stopped and continued after ``time.monotonic()`` was ``t``?"""
        return self.continued_at >= t
