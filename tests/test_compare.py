"""``distrl compare``: bad input in one line before anything runs, the report written from run
directories (compare.json rows, the seed's table in compare.md, the PNGs), and one short
comparison of two recipes end to end."""

from __future__ import annotations

import json
import sys

import pytest

from distrl.studies.compare import EXAMPLE_RECIPE, main, nproc_option
from distrl.studies.compare_report import PLOTS, write_report
from distrl.recipes import RECIPE_NAMES, get_recipe
from helpers import ROOT


def test_every_registered_recipe_has_a_seed_row_and_a_process_count():
    """Recipe facts live in the recipe: its row of the seed's table and its process count for compare."""
    for spec in (*RECIPE_NAMES, EXAMPLE_RECIPE):
        recipe = get_recipe(spec)
        assert len(recipe.table_row) == 6 and all(recipe.table_row), spec
    assert all(
        get_recipe(n).compare_nproc >= get_recipe(n).min_world_size or get_recipe(n).compare_nproc == 1
        for n in RECIPE_NAMES
    )


def test_nproc_takes_one_count_or_one_per_recipe():
    assert nproc_option("3") == 3
    assert nproc_option("impala=2, seed=4") == {"impala": 2, "seed": 4}
    for bad in ("0", "x", "impala=0", "=3", "impala"):
        with pytest.raises(Exception):
            nproc_option(bad)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--recipes", "sac"], "unknown recipe 'sac'"),
        (["--recipes", "impala,impala"], "distinct"),
        (["--recipes", "nowhere.py:recipe"], "nowhere.py"),
        (["--seeds", "x"], "--seeds expects ranges"),
        (["--budget-s", "-1"], "--budget-s must be > 0"),
        (["--frames", "0"], "--frames must be >= 1"),
        (["--nproc", "0"], "--nproc: must be >= 1"),
        (["--nproc", "impala=x"], "--nproc: invalid int value"),
        (["--recipes", "impala", "--nproc", "seed=3"], "--nproc names seed"),
        (["--env", "CartPol-v1"], "unknown env id 'CartPol-v1'"),
        (["--recipes", "apex", "--env", "Pendulum-v1", "--set", "algo.learner=dqn"], "apex: apex's double-DQN"),
        (["--recipes", "impala", "--set", "algo.nope=1"], "impala: --set algo.nope=1: unknown config field"),
        (["--recipes", "seed", "--nproc", "1", "--set", "transport.backend=rpc"], "seed: transport.backend=rpc needs"),
        (["--logger", "csv"], "--logger: invalid choice"),
        (["--report-only"], "holds no comparison"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_written(args, message, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert _status([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not out.exists()


def test_an_output_folder_that_holds_files_is_refused(tmp_path, capsys):
    (tmp_path / "old.txt").write_text("x")
    assert main(["--recipes", "vecenv", "--out", str(tmp_path)]) == 2
    assert "already holds files" in capsys.readouterr().err


def _status(argv: list[str]) -> int:
    """``main``'s exit status, also where argparse exits."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _run(tmp_path, label: str, seed: int, fps: float, reached: bool, lag_hist: dict, extra: dict = None) -> dict:
    """A finished run directory of ``label`` (summary.json and metrics.jsonl) and its record."""
    run_dir = tmp_path / "runs" / label / f"seed_{seed}"
    run_dir.mkdir(parents=True)
    summary = {
        "recipe": label,
        "fps": fps,
        "frame_skip": 1,
        "frames_per_s": fps,
        "env_frames": int(fps * 60),
        "eval_return_mean": 500.0 if reached else 120.0,
        "best_eval_return_mean": 500.0 if reached else 150.0,
        "target_reached": {"wall_s": 20.0 + seed, "env_frames": 1000} if reached else None,
        "min_return_after_target": 480.0 if reached else None,
        "return_mean_100": 490.0,
        "policy_lag_mean": 1.5,
        "policy_lag_max": max(lag_hist),
        "policy_lag_hist": {str(k): v for k, v in lag_hist.items()},
        "time_budget": {"learner": {"learn": 0.4, "wait": 0.5, "other": 0.1}, "actor": {"env": 0.9, "wait": 0.1}},
        "stop_reason": "max_time",
        **(extra or {}),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    rows = [{"step": 1000 * i, "time": 100.0 + 5 * i, "actor/return_mean_100": 50.0 * i} for i in range(1, 6)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {
        "label": label,
        "spec": label,
        "nproc": 3,
        "experiment": "default",
        "layout": "rank 0 learner",
        "seed": seed,
        "run_dir": str(run_dir),
        "log": str(run_dir.parent / f"seed_{seed}.log"),
        "exit_code": 0,
        "wall_s": 80.0,
        "killed": False,
        "cpu_s": 120.0,
    }


def _comparison(tmp_path) -> dict:
    """A comparison folder: impala (2 seeds, one reached the target), seed (inference figures),
    sf failed without a summary, apex skipped."""
    records = [
        _run(tmp_path, "impala", 0, 4000.0, True, {0: 10, 1: 80, 2: 10}, {"bytes_per_env_step": 44.8}),
        _run(tmp_path, "impala", 1, 5000.0, False, {1: 50, 3: 50}, {"bytes_per_env_step": 45.2}),
        _run(
            tmp_path,
            "seed",
            0,
            9000.0,
            True,
            {0: 100},
            {"inference_batch_fill_mean": 3.5, "frame_skip": 4, "frames_per_s": 36000.0},
        ),
        {
            "label": "sf",
            "spec": "sf",
            "nproc": 4,
            "experiment": "default",
            "layout": "rank 0 learner",
            "seed": 0,
            "run_dir": str(tmp_path / "runs" / "sf" / "seed_0"),
            "log": str(tmp_path / "runs" / "sf" / "seed_0.log"),
            "exit_code": 1,
            "wall_s": 5.0,
            "killed": False,
            "cpu_s": 4.0,
        },
        {
            "label": "apex",
            "spec": "apex",
            "nproc": 4,
            "experiment": "default",
            "layout": "",
            "skipped": "apex is a DQN",
        },
    ]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"label": "torn')
    meta = {
        "command": "distrl compare --out X",
        "env": "CartPole-v1",
        "budget": "60 s per run",
        "seeds": "0-1",
        "target_return": 475.0,
        "date": "2026-12-04 12:00 UTC",
        "machine": "2 cores (test), no GPU",
    }
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    return meta


def test_the_report_from_run_directories(tmp_path):
    meta = _comparison(tmp_path)
    rows = {r["recipe"]: r for r in write_report(tmp_path, meta)}
    assert list(rows) == ["impala", "seed", "sf", "apex"]  # the order they ran
    data = json.loads((tmp_path / "compare.json").read_text())
    assert [r["recipe"] for r in data["rows"]] == list(rows) and data["meta"]["plots"] == list(PLOTS)
    impala = rows["impala"]
    assert impala["status"] == "ok" and impala["fps"] == 4500.0 and impala["reached"] == "1/2"
    assert impala["time_to_target_s"] is None  # the median of 20 s and never is never (sweep's rule)
    assert impala["final_eval"] == 310.0 and impala["policy_lag_max"] == 3
    assert impala["policy_lag_hist"] == {0: 10, 1: 130, 2: 10, 3: 50}
    assert impala["frames_per_s"] is None  # no frame skip
    assert impala["bytes_per_env_step"] == pytest.approx(45.0) and impala["inference_batch_fill"] is None
    assert impala["cpu_cores_used"] == 1.5 and impala["busy_share_per_role"] == {"learner": 0.5, "actor": 0.9}
    seed = rows["seed"]
    assert seed["time_to_target_s"] == 20.0 and seed["inference_batch_fill"] == 3.5 and seed["frames_per_s"] == 36000.0
    assert (
        rows["sf"]["status"] == "failed" and "exit 1" in rows["sf"]["reason"] and "seed_0.log" in rows["sf"]["reason"]
    )
    assert rows["apex"]["status"] == "skipped" and rows["apex"]["reason"] == "apex is a DQN"
    md = (tmp_path / "compare.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(table) == 8  # each recipe in the seed's table and in the measured one
    assert (
        "| `impala` | IMPALA (2018) | CPU (inference) | GPU | async | on-policy at large scale | 3 | 4,500 | never "
        "(1/2) | 310.0 |" in md
    )
    assert "| `seed` | SEED RL (2020)" in md and "20.0 (1/1)" in md
    assert "failed: seed 0: exit 1" in md and "skipped: apex is a DQN" in md
    assert "Measured 2026-12-04 12:00 UTC on 2 cores (test)" in md and "Command: `distrl compare --out X`" in md
    for name in PLOTS:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({name})" in md
    assert "Infinity" not in (tmp_path / "compare.json").read_text()


def test_report_only_rewrites_the_report_and_says_a_run_failed(tmp_path, capsys):
    _comparison(tmp_path)
    assert main(["--report-only", "--out", str(tmp_path)]) == 1  # sf failed
    assert "[compare] wrote" in capsys.readouterr().out and (tmp_path / "compare.md").exists()


@pytest.mark.timeout(600)
def test_compare_two_recipes_end_to_end(tmp_path, jobs):
    """vecenv (one process) and impala (two) on CartPole for 5 s each: progress lines, every
    output, the figures from the runs' own summaries, and the W&B run."""
    out = tmp_path / "cmp"
    job = jobs.start(
        [
            sys.executable,
            ROOT / "launch" / "compare.py",
            "--recipes",
            "vecenv,impala",
            "--nproc",
            "impala=2",
            "--budget-s",
            "5",
            "--out",
            out,
            "--logger",
            "wandb",
        ]
    )
    assert job.wait(540) == 0, job.tail()
    for line in (
        "[compare] 1/2 vecenv, seed 0, 1 process(es): started",
        "[compare] 2/2 impala, seed 0: ",
        "  [impala] frames ",
        "  [vecenv] frames ",
    ):
        assert line in job.stdout, job.tail()
    rows = json.loads((out / "compare.json").read_text())["rows"]
    assert [(r["recipe"], r["status"], r["nproc"]) for r in rows] == [("vecenv", "ok", 1), ("impala", "ok", 2)]
    for r in rows:
        s = json.loads((out / "runs" / r["recipe"] / "seed_0" / "summary.json").read_text())
        assert s["stop_reason"] == "max_time" and r["fps"] == s["fps"] and r["final_eval"] == s["eval_return_mean"]
        assert r["cpu_cores_used"] > 0 and r["policy_lag_hist"]
    assert rows[1]["bytes_per_env_step"] > 0 and set(rows[1]["busy_share_per_role"]) == {"learner", "actor"}
    for name in PLOTS:
        assert (out / name).stat().st_size > 0
    assert "| `impala` | IMPALA (2018)" in (out / "compare.md").read_text()
    assert list((out / "wandb").glob("offline-run-*"))
