"""NaN losses in every learner (issue #30, path 6): each recipe's learner goes through
``LearnerSession.apply_loss``, which skips a non-finite step, counts it and stops after 10 in a row
with status 3 and one line, keeping the last good checkpoint as the newest. impala's own test
(tests/test_reliability.py) also checks the checkpoint; here every other recipe, in one process."""

from __future__ import annotations

import pytest

from helpers import child_env, read_summary


@pytest.mark.timeout(150)
@pytest.mark.parametrize("recipe", ["seed", "sf", "a3c", "apex", "vecenv"])
def test_every_learner_skips_nan_losses_then_stops_with_status_3(recipe, tmp_path, jobs):
    run = tmp_path / "run"
    args = [
        recipe,
        "--experiment",
        "debug",
        "--logger",
        "none",
        "--run-dir",
        str(run),
        "--total-frames",
        "10000000",
        "--max-time-s",
        "120",
    ]
    proc = jobs.train(args, env=child_env(DISTRL_FAULT="nan_loss@0:5"), timeout=140)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    # the 10th in a row stops the run; vecenv's ranks agree to stop once per rollout, after its 16 minibatches
    assert s["stop_reason"] == "nonfinite_loss"
    assert s["counters"]["skipped_nonfinite_updates"] == (16 if recipe == "vecenv" else 10)
    assert "non-finite losses in a row" in proc.stdout
