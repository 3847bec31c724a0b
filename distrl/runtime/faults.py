"""Deterministic fault injection for the reliability tests (and for trying failures by hand).

``DISTRL_FAULT`` names faults as ``kind@rank:step`` items separated by commas, e.g.
``DISTRL_FAULT=kill@2:30,nan_loss@0:20``: rank 2 SIGKILLs itself at its 30th step, and the
learner's loss becomes NaN from its 20th update on. A "step" is the role's own loop count (an
actor's unroll, a learner's update). Kinds:

| kind | who | what happens |
|---|---|---|
| ``kill`` | any rank | SIGKILL itself (a crash no handler sees) |
| ``stop`` | any rank | SIGSTOP itself (a hung process; SIGCONT resumes it) |
| ``sigterm`` | any rank | SIGTERM itself (as a scheduler's preemption would) |
| ``eval_sigterm`` | learner | SIGTERM itself at that step of an evaluation (its vector steps), once |
| ``checkpoint_sigterm`` | learner | SIGTERM itself in its first checkpoint from that update on, before the write |
| ``env_error`` | actor, env worker | its environment raises inside ``step``, once |
| ``env_error_always`` | actor, env worker | its environment raises on every step from then on (the give-up path) |
| ``env_hang`` | actor, env worker | its environment's step never returns (a hung env: ``run.env_step_timeout_s``) |
| ``bad_obs`` | actor | it sends float64 observations of the wrong width |
| ``nan_loss`` | learner | every loss from that update on is NaN |
| ``inf_grad`` | learner | a finite loss's gradient is infinite at that update and the next 9 (each once) |
| ``nan_reward`` | Ape-X actor | one reward of that unroll is NaN, once |
| ``never_start`` | any rank | never joins the group (sleeps before ``start``) |
| ``crash_before_rename`` | checkpoint writer | dies between a checkpoint's temp file and its rename |

Each injected fault appends a line to ``$DISTRL_FAULT_LOG`` (if set) with the wall-clock time,
so tests can measure time to detection across processes.
"""

from __future__ import annotations

import json
import os
import signal
import time
from functools import lru_cache


@lru_cache(maxsize=None)
def _parse(spec: str) -> dict[tuple[str, int], int]:
    faults = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        kind, _, where = item.partition("@")
        if not where:
            continue
        rank, _, step = where.partition(":")
        faults[(kind, int(rank))] = int(step or 0)
    return faults


def due(kind: str, rank: int, step: int) -> bool:
    """True when fault ``kind`` is scheduled for ``rank`` at ``step`` or earlier.

    Faults fire in a job's first attempt only: after a torchrun restart the job must be able to
    show that it recovers.
    """
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return False
    at = _parse(os.environ.get("DISTRL_FAULT", "")).get((kind, rank))
    return at is not None and step >= at


def env_fails(rank: int, step: int, failures: int) -> bool:
    """True (and recorded) when the env of ``rank`` is to raise at ``step``: ``env_error`` before
    its first failure (``failures`` so far), ``env_error_always`` every time. ``env_hang`` blocks
    here for ever instead, as a hung env's step would."""
    if due("env_hang", rank, step):
        record("env_hang", rank, step)
        while True:
            time.sleep(3600)
    for kind in ("env_error", "env_error_always"):
        if due(kind, rank, step) and (kind == "env_error_always" or not failures):
            record(kind, rank, step)
            return True
    return False


def record(kind: str, rank: int, step: int) -> None:
    """Note an injected fault (stdout and ``$DISTRL_FAULT_LOG``)."""
    print(f"[fault] injecting {kind} on rank {rank} at step {step}", flush=True)
    path = os.environ.get("DISTRL_FAULT_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"kind": kind, "rank": rank, "step": step, "time": time.time()}) + "\n")


#: the kinds that SIGTERM the learner in the middle of its evaluation and of its checkpoint
IN_EVALUATION, IN_CHECKPOINT = "eval_sigterm", "checkpoint_sigterm"


def maybe_signal(rank: int, step: int, kind: str = "") -> None:
    """Deliver a scheduled ``kill``, ``stop`` or ``sigterm`` to this process, once; with ``kind``
    (:data:`IN_EVALUATION`, :data:`IN_CHECKPOINT`), that kind's SIGTERM only."""
    kinds = (
        ((kind, signal.SIGTERM),)
        if kind
        else (("kill", signal.SIGKILL), ("stop", signal.SIGSTOP), ("sigterm", signal.SIGTERM))
    )
    for kind, sig in kinds:
        if due(kind, rank, step) and (kind, rank) not in _fired:
            _fired.add((kind, rank))
            record(kind, rank, step)
            os.kill(os.getpid(), sig)


_fired: set[tuple[str, int]] = set()

INF_GRAD_TIMES = 10  #: updates whose gradient ``inf_grad`` makes infinite
_fired_at: dict[tuple[str, int], list[int]] = {}


def due_at(kind: str, rank: int, step: int, times: int = 1) -> bool:
    """True (and recorded) when ``kind`` is due at ``step`` and has fired fewer than ``times`` times,
    never twice at one step: a skipped update retried at the same step count goes through."""
    fired = _fired_at.setdefault((kind, rank), [])
    if not due(kind, rank, step) or len(fired) >= times or step in fired:
        return False
    fired.append(step)
    record(kind, rank, step)
    return True
