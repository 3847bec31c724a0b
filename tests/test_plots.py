"""Learning-curve plots: series read back from metrics.jsonl, several runs on shared axes, the CLI."""

from __future__ import annotations

import json
import sys

import pytest

from helpers import ROOT
from distrl.logging.plots import load_series, plot_runs


def write_run(run_dir, recipe: str, rows: list[dict], torn_tail: bool = False) -> None:
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"recipe": recipe}))
    lines = [json.dumps(r) for r in rows] + (['{"step": 99, "ti'] if torn_tail else [])
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_series_are_read_back_in_frames_and_seconds(tmp_path):
    rows = [
        {"step": 1000 * i, "time": 50.0 + 2 * i, "actor/return_mean_100": 10.0 + i, "learner/fps": 500.0}
        for i in range(1, 4)
    ]
    write_run(tmp_path / "a", "impala", rows, torn_tail=True)  # a killed run's half-written last row
    s = load_series(tmp_path / "a")
    assert s["actor/return_mean_100"] == [(1000.0, 0.0, 11.0), (2000.0, 2.0, 12.0), (3000.0, 4.0, 13.0)]
    assert set(s) == {"actor/return_mean_100", "learner/fps"}


def test_runs_with_different_metrics_share_one_figure(tmp_path):
    base = [{"step": 100 * i, "time": float(i), "actor/return_mean_100": float(i)} for i in range(1, 5)]
    write_run(tmp_path / "impala", "impala", [r | {"learner/policy_lag_mean": 2.0} for r in base])
    write_run(tmp_path / "seed", "seed", [r | {"inference/batch_fill": 1.5} for r in base])
    out = plot_runs([tmp_path / "impala", tmp_path / "seed"], tmp_path / "cmp.png", x="time")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="x must be"):
        plot_runs([tmp_path / "seed"], tmp_path / "x.png", x="updates")


def test_cli_writes_the_png_and_rejects_a_missing_run_in_one_line(tmp_path, jobs):
    write_run(tmp_path / "r", "vecenv", [{"step": 10, "time": 0.0, "learner/fps": 1.0}])
    plot = [sys.executable, str(ROOT / "launch" / "plot.py")]
    ok = jobs.start([*plot, str(tmp_path / "r"), "--out", str(tmp_path / "c.png")])
    assert ok.wait(120) == 0 and (tmp_path / "c.png").exists(), ok.tail()
    bad = jobs.start([*plot, str(tmp_path / "nope")])
    assert bad.wait(120) == 2 and bad.stderr.count("\n") == 1 and "no metrics.jsonl" in bad.stderr
