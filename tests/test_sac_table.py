"""experiments/sac_table.py: the score held at T minutes, medians over seeds, both systems' files read
as their writers write them. Quick tier."""

from __future__ import annotations

import json

import pytest

from experiments import sac_table


def write_apex(run, evals):
    run.mkdir(parents=True)
    rows = [{"wall_s": m * 60, "env_frames": s, "updates": s, "return_mean": r} for m, s, r in evals]
    (run / "summary.json").write_text(json.dumps({"evals": rows}))


def write_sb3(run, checkpoints):
    run.mkdir(parents=True)
    rows = [
        {"checkpoint": "x", "wall_s": m * 60, "env_steps": s, "mean": r, "median": r, "returns": [r]}
        for m, s, r in checkpoints
    ]
    (run / "results.json").write_text(json.dumps({"checkpoints": rows[::-1]}))  # any order: sorted by time


def test_the_score_at_t_is_the_latest_evaluation_not_the_best():
    points = [(2.0, 10, 100.0), (4.0, 20, 900.0), (6.0, 30, 500.0)]
    assert sac_table.at_minutes(points, 1.0) is None
    assert sac_table.at_minutes(points, 4.0) == 900.0
    assert sac_table.at_minutes(points, 10.0) == 500.0
    assert sac_table.at_minutes([(30.02, 40, 7.0)], 30.0) == 7.0  # the stop's evaluation, 1 s past the budget


def test_the_score_at_s_steps_needs_a_run_that_got_there():
    points = [(2.0, 10_000, 100.0), (4.0, 30_000, 900.0), (6.0, 50_000, 500.0)]
    assert sac_table.at_steps(points, 5_000) is None  # before the first evaluation
    assert sac_table.at_steps(points, 30_000) == 900.0
    assert sac_table.at_steps(points, 49_999) == 900.0
    assert sac_table.at_steps(points, 50_000) == 500.0
    assert sac_table.at_steps(points, 60_000) is None  # the run stopped short


def test_the_steps_table_sets_the_runs_beside_cleanrls_published_curve(tmp_path):
    for seed, final in ((0, 4000.0), (1, 6000.0)):
        write_apex(tmp_path / f"apex_hopper_s{seed}", [(10, 50_000, final - 1000), (30, 150_000, final)])
    runs = sac_table.load({sac_table.SYSTEMS[0]: str(tmp_path / "apex_{env}_s{seed}")}, ["hopper"], [0, 1])
    text = sac_table.steps_table(runs, ["hopper"], [50_000, 100_000, 200_000])
    assert "| hopper | apex (distrl) | 2 | **4,000** (3,000, 5,000) | **4,000** (3,000, 5,000) | - |" in text
    published = sac_table.CLEANRL_SAC["hopper"]
    assert f"| {published[50_000]:,} | {published[100_000]:,} | {published[200_000]:,} |" in text


def test_who_reached_the_target_and_when(tmp_path):
    write_apex(tmp_path / "apex_hopper_s0", [(10, 50_000, 1000.0), (22, 147_000, 3234.0), (30, 196_000, 1401.0)])
    write_apex(tmp_path / "apex_hopper_s1", [(10, 50_000, 1000.0), (31, 200_000, 3000.0)])
    runs = sac_table.load({sac_table.SYSTEMS[0]: str(tmp_path / "apex_{env}_s{seed}")}, ["hopper"], [0, 1])
    assert sac_table.first_reach(runs[sac_table.SYSTEMS[0]]["hopper"][0], 2500, 30) == (22, 147_000)
    (line,) = sac_table.reach_lines(runs, {"hopper": 2500}, 30)
    assert line == (
        "- hopper, apex (distrl): 1/2 reached 2,500 within 30 min (seed 0: 22.0 min (147,000 steps), seed 1: no)"
    )


def test_the_table_has_medians_over_the_seeds_that_ran(tmp_path):
    for seed, final in ((0, 4000.0), (1, 6000.0), (2, 5000.0)):
        write_apex(tmp_path / f"apex_halfcheetah_s{seed}", [(10, 100_000, final - 1000), (30, 250_000, final)])
    write_sb3(tmp_path / "sb3_halfcheetah_s0", [(10, 60_000, 2000.0), (30, 160_000, 3500.0)])
    runs = sac_table.load(
        {
            sac_table.SYSTEMS[0]: str(tmp_path / "apex_{env}_s{seed}"),
            sac_table.SYSTEMS[1]: str(tmp_path / "sb3_{env}_s{seed}"),
        },
        ["halfcheetah", "hopper"],
        [0, 1, 2],
    )
    text = sac_table.table(runs, ["halfcheetah", "hopper"], [10, 30])
    assert (
        "| halfcheetah | apex (distrl) | 3 | **4,000** (3,000, 5,000, 4,000) | **5,000** (4,000, 6,000, 5,000) |"
        in text
    )
    assert "| halfcheetah | SB3 SAC | 1 | **2,000** (2,000) | **3,500** (3,500) | 160,000 |" in text
    assert "hopper" not in text  # no run: no row
    written = sac_table.plot(runs, ["halfcheetah"], str(tmp_path / "sac"))
    assert [p.name for p in written] == ["sac_time.png", "sac_steps.png"] and all(p.stat().st_size > 0 for p in written)


def test_no_run_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no run found"):
        sac_table.main(["--apex", str(tmp_path / "a_{env}_{seed}"), "--sb3", str(tmp_path / "b_{env}_{seed}")])
