"""An env that raises (distrl/roles/env_recovery.py): the worker counts it, backs off, recreates the
env and goes on; after ``run.env_max_failures`` failures in a row it gives up with one line naming
the env id, the count and the last exception. Unit tests of the policy (no sleeping), then short
runs at world size 1, in this process, with an injected env fault (distrl/runtime/faults.py)."""

from __future__ import annotations

import json

import pytest

from distrl.roles.env_recovery import EnvFailedError, EnvRecovery
from helpers import read_summary


def _recovery(max_failures: int = 10, **kw) -> tuple[EnvRecovery, list[float]]:
    slept: list[float] = []
    return EnvRecovery("Toy-v0", max_failures, sleep=slept.append, **kw), slept


def test_backoff_doubles_and_is_capped():
    rec, slept = _recovery(max_failures=10, base_s=0.1, cap_s=1.0)
    for _ in range(7):
        rec.failed(RuntimeError("boom"), "actor 1")
    assert slept == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    assert rec.failures == rec.in_a_row == 7


def test_a_success_streak_resets_the_backoff_but_not_the_count():
    rec, slept = _recovery(max_failures=3, reset_after=2)
    rec.failed(RuntimeError("a"), "w")
    rec.failed(RuntimeError("b"), "w")
    rec.succeeded()  # one success is not a streak of two: still two in a row
    assert rec.in_a_row == 2
    rec.succeeded()
    assert rec.in_a_row == 0
    rec.failed(RuntimeError("c"), "w")
    rec.failed(RuntimeError("d"), "w")  # would be the third in a row without the streak
    assert slept == pytest.approx([0.1, 0.2, 0.1, 0.2])
    assert rec.failures == 4


def test_gives_up_after_max_failures_in_a_row_with_one_line(capsys):
    rec, slept = _recovery(max_failures=3)
    rec.failed(RuntimeError("first"), "actor 1")
    rec.failed(RuntimeError("second"), "actor 1")
    with pytest.raises(EnvFailedError) as info:
        rec.failed(ValueError("bad\nstate"), "actor 1")
    msg = str(info.value)
    assert "\n" not in msg
    assert "Toy-v0" in msg and "3 times in a row" in msg and "ValueError: bad state" in msg
    assert isinstance(info.value.__cause__, ValueError)
    assert len(slept) == 2  # no sleep before giving up
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all("[actor 1] environment Toy-v0 failed (RuntimeError" in line for line in lines)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="max_failures"):
        EnvRecovery("Toy-v0", 0)


# ---- runs at world size 1, in this process ----------------------------------------------------------


@pytest.mark.timeout(120)
def test_impala_actor_gives_up_on_an_env_that_always_fails(tmp_path, in_process, capsys, monkeypatch):
    run = tmp_path / "run"
    args = [
        "impala",
        "--experiment",
        "debug",
        "--logger",
        "none",
        "--run-dir",
        str(run),
        "--set",
        "algo.local_actors=1",
        "--set",
        "run.env_max_failures=3",
        "--set",
        "run.peer_grace_s=1",
    ]
    monkeypatch.setenv("DISTRL_FAULT", "env_error_always@1:3")
    status = in_process(args)
    out = "".join(capsys.readouterr())
    assert status == 4, out[-3000:]  # the only actor is lost: all_peers_lost after the grace
    assert out.count("environment distrl/MatchSign-v0 failed") == 2  # recovered twice, gave up on the third
    gave_up = [line for line in out.splitlines() if "giving up" in line]
    assert gave_up and "env distrl/MatchSign-v0 failed 3 times in a row" in gave_up[0], gave_up
    assert "RuntimeError: injected environment failure" in gave_up[0]
    assert "[runner] rank 1 (actor) failed: EnvFailedError" in out
    assert read_summary(run)["stop_reason"] == "all_peers_lost"


# ---- the same recovery in every env-stepping recipe, in one process ---------------------------------

#: recipe -> (the first env-stepping rank at world size 1, its log name): Sample Factory's rollout workers
#: come after the learner and the inference rank, Ape-X's actors after its replay shard; a SEED env
#: worker recreates its env group, which the server sees come back under its own run id
STEPPERS = {
    "sf": (2, "rollout_worker 2 group "),
    "apex": (2, "actor 2]"),
    "a3c": (1, "worker 1]"),
    "seed": (1, "[env_worker 1 group "),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("recipe", sorted(STEPPERS))
def test_an_env_error_is_recovered_and_counted_in_every_recipe(recipe, tmp_path, in_process, capsys, monkeypatch):
    """An env raising once in an sf rollout worker, an Ape-X actor, an A3C worker or a SEED env worker:
    one line naming the worker, the env recreated, the run ends as planned and summary.json counts it
    (as impala's)."""
    rank, who = STEPPERS[recipe]
    monkeypatch.setenv("DISTRL_FAULT", f"env_error@{rank}:3")
    monkeypatch.setenv("DISTRL_FAULT_LOG", str(tmp_path / "faults.jsonl"))
    run = tmp_path / "run"
    argv = [recipe, "--experiment", "debug", "--logger", "none", "--run-dir", str(run), "--total-frames", "4000"]
    assert in_process(argv + ["--set", "run.eval_episodes=2"]) == 0
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if "environment distrl/MatchSign-v0 failed" in line]
    assert len(failed) == 1 and who in failed[0] and "injected environment failure" in failed[0], failed
    assert [json.loads(line)["kind"] for line in (tmp_path / "faults.jsonl").read_text().splitlines()] == ["env_error"]
    s = read_summary(run)
    assert s["stop_reason"] == "total_frames" and not s["lost_ranks"], s
    assert s["counters"]["env_errors"] == 1, s["counters"]
