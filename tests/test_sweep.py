"""Seed sweeps: the statistics against their definitions, a seed's result from its summary, the
tracker's target accounting, and the sweep command end to end on the toy env."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from distrl.recipes.impala.recipe import default as default_config
from distrl.config import override
from distrl.logging.tracker import RunTracker
from distrl.studies.stats import bootstrap_ci, iqm, median_iqr, quantile
from distrl.studies.sweep import aggregate, seed_result
from helpers import ROOT


@pytest.mark.parametrize(
    "xs", [[3.0], [5.0, 1.0], [4.0, 1.0, 9.0, 2.0, 7.0], list(np.random.default_rng(0).normal(size=13))]
)
def test_quantiles_match_numpy(xs):
    for q in (0.0, 0.25, 0.5, 0.75, 1.0):
        assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)), abs=1e-12)


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8]) == 4.5  # cuts 1, 2 and 7, 8
    assert iqm([1, 2, 3, 100]) == 2.5  # one outlier cut from each end
    assert iqm([10, 0, 0, 0, 1000, 0, 0, 0, 0, 20]) == pytest.approx(
        np.mean(sorted([10, 0, 0, 0, 1000, 0, 0, 0, 0, 20])[2:8])
    )


def test_median_with_never_reached_runs_counts_them():
    med, q1, q3 = median_iqr([10.0, 20.0, math.inf, math.inf, math.inf])
    assert med == math.inf and q1 == 20.0 and q3 == math.inf  # most failed: no flattering median


def test_bootstrap_interval_holds_the_estimate_and_narrows_with_more_runs():
    rng = np.random.default_rng(1)
    few, many = list(rng.normal(100, 10, size=5)), list(rng.normal(100, 10, size=200))
    lo, hi = bootstrap_ci(few)
    assert lo <= iqm(few) <= hi
    lo2, hi2 = bootstrap_ci(many)
    assert hi2 - lo2 < hi - lo and lo2 < 100 < hi2
    assert bootstrap_ci(few) == (lo, hi)  # seeded: the same table every time


def _summary(tmp_path, name, **fields):
    run = tmp_path / name
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"fps": 1000.0, "eval_return_mean": 500.0, **fields}))
    return run


def test_seed_result_holds_only_when_reached_kept_and_evaluated(tmp_path):
    reached = {"wall_s": 30.0, "env_frames": 2_000_000}
    good = seed_result(_summary(tmp_path, "a", target_reached=reached, min_return_after_target=410.0), 0, 475)
    fell = seed_result(_summary(tmp_path, "b", target_reached=reached, min_return_after_target=20.0), 1, 475)
    bad_eval = seed_result(
        _summary(tmp_path, "c", target_reached=reached, min_return_after_target=400.0, eval_return_mean=300.0), 2, 475
    )
    never = seed_result(_summary(tmp_path, "d", target_reached=None), 3, 475)
    crashed = seed_result(tmp_path / "missing", 4, 475)
    assert good["held"] and good["time_to_target_s"] == 30.0
    assert not fell["held"] and not bad_eval["held"] and fell["reached"]
    assert not never["reached"] and never["time_to_target_s"] == math.inf
    assert not crashed["finished"] and not crashed["held"]
    agg = aggregate([good, fell, bad_eval, never, crashed])
    assert (agg["seeds"], agg["reached"], agg["held"]) == (5, 3, 1)
    assert agg["time_to_target_median_s"] == 30.0 and agg["min_return_after_target_min"] == 20.0


def test_tracker_times_the_first_crossing_and_the_lowest_mean_after(tmp_path):
    cfg = override(default_config(), **{"run.target_return": 100.0, "run.early_stop": False})
    t = RunTracker(cfg, tmp_path, {0: "learner"}, None)
    t.add_episodes([50.0] * 100)
    assert t.target_reached is None
    t.add_frames(1000)
    t.add_episodes([150.0] * 50)  # the mean crosses 100 at the 50th: (50*50 + 150*50) / 100
    assert t.target_reached["env_frames"] == 1000 and t.min_return_after_target == 100.0
    t.add_episodes([0.0] * 30)
    assert t.min_return_after_target == pytest.approx((20 * 50 + 50 * 150) / 100)
    assert t.stop_reason() is None  # early_stop=false: the target is measured, not obeyed
    state = t.state_dict()
    t2 = RunTracker(cfg, tmp_path, {0: "learner"}, None)
    t2.load_state_dict(state)
    assert (t2.target_reached, t2.min_return_after_target) == (t.target_reached, t.min_return_after_target)


def test_tracker_keeps_the_best_eval(tmp_path):
    t = RunTracker(default_config(), tmp_path, {0: "learner"}, None)
    assert t.add_eval([10.0, 20.0]) and not t.add_eval([5.0]) and t.add_eval([15.0])  # ties go to the later
    assert t.best_eval["return_mean"] == 15.0 and len(t.evals) == 3


@pytest.mark.timeout(300)
def test_sweep_command_on_the_toy_env(tmp_path, jobs):
    """Three seeds of impala's debug run, two at a time: table, JSON, curves, and every seed held
    a target of 15 on the toy env (uniform play scores 10, perfect 20). 30k frames, not debug's
    20k: the seeds cross 15 at 17-19k frames, which left a tail too short to judge holding. Floor
    13: a learner that falls back towards uniform play (10) fails it; a working one dipped to 14.9
    at worst (the 100-episode mean wanders ~0.3 over the tail, and climbs)."""
    out = tmp_path / "sweep"
    job = jobs.start(
        [
            sys.executable,
            ROOT / "launch" / "sweep.py",
            "impala",
            "--seeds",
            "0-2",
            "--parallel",
            "2",
            "--max-time-s",
            "60",
            "--target-return",
            "15",
            "--hold-floor",
            "13",
            "--out",
            out,
            "--experiment",
            "debug",
            "--total-frames",
            "30000",
            "--set",
            "run.logger=csv",
            "--set",
            "run.eval_interval_s=1",
        ]
    )
    assert job.wait(240) == 0, job.tail()
    data = json.loads((out / "sweep.json").read_text())
    print("\n" + (out / "sweep.md").read_text())
    assert len(data["seeds"]) == 3 and data["aggregate"]["held"] == 3, (out / "sweep.md").read_text()
    assert (out / "curves.png").stat().st_size > 0 and "| seed |" in (out / "sweep.md").read_text()
    for seed in range(3):
        s = json.loads((out / f"seed_{seed}" / "summary.json").read_text())
        assert s["stop_reason"] == "total_frames" and s["evals"], s  # no early stop; periodic evals ran
        assert (out / f"seed_{seed}" / "checkpoints" / "best.pt").exists()


def test_a_sweep_whose_seeds_fail_exits_1(tmp_path, capsys, jobs):
    """Each seed's run refuses its env (exit 2, one line in its log): the sweep still writes its
    report, names the failed seeds and exits 1, as ``distrl compare`` does (it used to exit 0).
    (``jobs``: the sweep starts processes, which marks the test integration.)"""
    from distrl.studies.sweep import main

    out = tmp_path / "sweep"
    code = main(["vecenv", "--seeds", "0-1", "--parallel", "2", "--max-time-s", "5", "--out", str(out),
                 "--env", "NoSuchEnv-v0"])  # fmt: skip
    assert code == 1
    assert "2 of 2 seeds failed: [0, 1]" in capsys.readouterr().err
    assert (out / "sweep.md").is_file() and "NoSuchEnv-v0" in (out / "seed_0.log").read_text()
