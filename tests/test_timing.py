"""The per-role time budget: phases partition the wall time; the learner's book merges ranks."""

from __future__ import annotations

import time

import pytest

from distrl.logging.timing import BudgetBook, TimeBudget, fractions


def test_phases_and_other_partition_the_wall_time():
    b = TimeBudget()
    with b("env"):
        time.sleep(0.05)
    with b("policy"):
        time.sleep(0.02)
    time.sleep(0.03)  # outside every phase: "other"
    totals = b.totals()
    assert set(totals) == {"env", "policy", "other"}
    assert totals["env"] >= 0.05 and totals["policy"] >= 0.02 and totals["other"] >= 0.03
    assert sum(fractions(totals).values()) == pytest.approx(1.0)
    td = b.as_tensordict()
    assert float(td["env"]) == pytest.approx(totals["env"])


def test_a_phase_that_raises_is_still_counted():
    b = TimeBudget()
    with pytest.raises(ValueError):
        with b("learn"):
            time.sleep(0.01)
            raise ValueError
    assert b.totals()["learn"] >= 0.01


def test_book_sums_the_ranks_of_a_role_and_keeps_the_newest_totals():
    book = BudgetBook({0: "learner", 1: "actor", 2: "actor"})
    book.update(1, {"env": 1.0, "other": 1.0})
    book.update(1, {"env": 3.0, "other": 1.0})  # running totals: the newest replaces
    book.update(2, {"env": 1.0, "transport": 3.0})
    book.update(0, {"learn": 2.0, "wait": 2.0})
    book.update(0, {"forward": 1.0, "other": 3.0}, role="inference")  # a second loop on rank 0
    per = book.per_role()
    assert per["actor"] == {
        "env": pytest.approx(4 / 8),
        "other": pytest.approx(1 / 8),
        "transport": pytest.approx(3 / 8),
    }
    assert per["learner"] == {"learn": 0.5, "wait": 0.5} and per["inference"]["forward"] == 0.25
    assert all(k.count("/") == 1 for k in book.metrics())  # metric names stay role/name
