"""Where a role's time goes: a per-role time budget (env stepping, policy forward, waiting on the
transport, serialisation, learning, idle), so that a slow run says why.

A role owns one :class:`TimeBudget` and wraps the phases of its loop::

    budget = TimeBudget()
    with budget("env"):
        obs = env.step(action)
    with budget("policy"):
        action = policy(obs)

Time not inside any phase is ``other`` (Python between phases). Phases do not nest: the budget
is a partition of the loop's wall time, so its fractions add up to 1. Roles other than the
learner ship :meth:`TimeBudget.totals` (seconds per phase, running totals) in the messages they
already send; the learner's :class:`BudgetBook` keeps the newest totals of every rank and reports
fractions per role (``<role>/time_<phase>`` metrics and ``summary.json``'s ``time_budget``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator, Mapping

import torch
from tensordict import TensorDict

from distrl.data import keys


class TimeBudget:
    """Seconds spent per phase since the role started (monotonic clock)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t0

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] += seconds

    def totals(self) -> dict[str, float]:
        """Seconds per phase, ``other`` being the wall time outside every phase."""
        wall = time.perf_counter() - self.start
        out = dict(self.seconds)
        out["other"] = max(wall - sum(self.seconds.values()), 0.0)
        return out

    def as_tensordict(self) -> TensorDict:
        """The totals as a TensorDict of float64 scalars, to ride in a message."""
        return TensorDict({k: torch.tensor(v, dtype=torch.float64) for k, v in self.totals().items()})

    def maybe_send(self, transport, learner: int, rank: int, interval_s: float = 2.0) -> None:
        """Every ``interval_s``: send the totals to the learner's ``time_budget`` handler, without
        waiting for the reply (a control-plane message of a few dozen bytes; a failure is the
        liveness check's business, not this one's)."""
        now = time.perf_counter()
        if now - getattr(self, "_last_sent", self.start) < interval_s:
            return
        self.send(transport, learner, rank, interval_s * 5)

    def send(self, transport, learner: int, rank: int, timeout_s: float):
        """Send the totals now; the call's future (a role's last send waits for it, so that its
        totals are in before its goodbye: a short run may end between two periodic sends)."""
        self._last_sent = time.perf_counter()
        td = self.as_tensordict()
        td[keys.WORKER_RANK] = torch.tensor(rank)
        return transport.call(learner, "time_budget", td, timeout_s)


def fractions(totals: Mapping[str, float]) -> dict[str, float]:
    """Each phase's share of the role's wall time (they add up to 1)."""
    wall = sum(totals.values())
    return {k: v / wall for k, v in sorted(totals.items())} if wall > 0 else {}


class BudgetBook:
    """The learner's view: the newest totals of every rank, averaged per role."""

    def __init__(self, roles: Mapping[int, str]):
        self.roles = dict(roles)
        self.latest: dict[tuple[int, str], dict[str, float]] = {}

    def update(self, rank: int, totals: Mapping[str, float] | TensorDict, role: str | None = None) -> None:
        """The newest running totals of ``rank`` (``role`` names a second loop on that rank, e.g.
        the inference thread beside SEED's learner; by default the rank's role)."""
        if isinstance(totals, TensorDict):
            totals = {k: float(v) for k, v in totals.items()}
        self.latest[(rank, role or self.roles.get(rank, str(rank)))] = dict(totals)

    def per_role(self) -> dict[str, dict[str, float]]:
        """``{role: {phase: fraction}}``: the ranks of one role summed, then normalised."""
        summed: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for (_, role), totals in self.latest.items():
            for phase, seconds in totals.items():
                summed[role][phase] += seconds
        return {role: {k: round(v, 4) for k, v in fractions(t).items()} for role, t in sorted(summed.items())}

    def metrics(self) -> dict[str, float]:
        """``<role>/time_<phase>`` fractions for a metrics row (metric names stay ``role/name``)."""
        return {f"{role}/time_{phase}": f for role, fr in self.per_role().items() for phase, f in fr.items()}
