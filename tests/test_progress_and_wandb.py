"""The progress line's budget and ETA, and what W&B receives (a fake WandbLogger: no wandb start)."""

from __future__ import annotations

import time

import pytest

from distrl.recipes.impala.recipe import default as default_config
from distrl.config import override
from distrl.logging import tracker as tracker_module
from distrl.logging.tracker import RunTracker


class Clock:
    """The tracker's ``time`` module as the tests see it: ``monotonic()`` reads ``t``, which the test
    moves; everything else is the real module (only the tracker's own name is replaced, never
    ``time.monotonic`` for the whole interpreter)."""

    def __init__(self):
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(tracker_module, "time", c)
    return c


def test_progress_is_the_further_budget_and_eta_the_sooner_one(clock, tmp_path, capsys):
    cfg = override(default_config(), **{"run.total_frames": 1_000_000, "run.max_time_s": 100.0})
    t = RunTracker(cfg, tmp_path, {0: "learner"}, None)
    clock.t += 10
    t.add_frames(400_000)  # 40% of the frames in 10% of the time: frames lead, 600k left at 40k/s
    assert t.progress() == pytest.approx((0.4, 15.0))
    clock.t += 10
    assert t.progress() == pytest.approx((0.4, 30.0))  # no frames for 10 s: the rate halved
    t.maybe_report(force=True)
    assert capsys.readouterr().out.rstrip().endswith("|  40% eta 30s")
    slow = RunTracker(cfg, tmp_path, {0: "learner"}, None)
    clock.t += 50
    slow.add_frames(10_000)  # time leads: 50% of 100 s; the frames would take 4950 s more
    assert slow.progress() == pytest.approx((0.5, 50.0))
    slow.maybe_report(force=True)
    assert capsys.readouterr().out.rstrip().endswith("|  50% eta 50s")
    assert tracker_module._duration(185) == "3m05s" and tracker_module._duration(7900) == "2h11m"


def test_progress_after_resume_uses_this_runs_rate(clock, tmp_path):
    cfg = override(default_config(), **{"run.total_frames": 1_000_000, "run.max_time_s": 1000.0})
    t = RunTracker(cfg, tmp_path, {0: "learner"}, None)
    t.load_state_dict(
        {
            "env_frames": 500_000,
            "episodes": 0,
            "updates": 0,
            "returns": [],
            "lag_sum": 0.0,
            "lag_count": 0,
            "lag_max": 0,
            "lag_hist": {},
            "counters": {},
            "wall_s": 100.0,
        }
    )
    clock.t += 10
    t.add_frames(100_000)  # 10k/s in this run; 400k left
    assert t.progress() == pytest.approx((0.6, 40.0))


def test_the_running_rate_leaves_out_the_start_up_and_the_wind_down(clock, tmp_path):
    t = RunTracker(default_config(), tmp_path, {0: "learner"}, None)
    assert t.fps_running is None
    clock.t += 30  # start-up: processes, envs, first resets
    t.add_frames(1000)  # the first batch: the rate starts here, as a collector's after its first
    assert t.fps_running is None
    clock.t += 10
    t.add_frames(20_000)
    clock.t += 10
    t.add_frames(30_000)
    clock.t += 40  # wind-down: evaluation, goodbyes
    assert t.fps_running == pytest.approx(50_000 / 20)
    summary = t.summary("total_frames", [])
    assert summary["fps_running"] == pytest.approx(2500.0) and summary["fps"] == pytest.approx(51_000 / 90, abs=0.1)


class FakeWandbLogger:
    instances: list["FakeWandbLogger"] = []

    def __init__(self, **kwargs):
        self.kwargs, self.rows = kwargs, []
        FakeWandbLogger.instances.append(self)

    def log_metrics(self, metrics, step=None):
        self.rows.append((dict(metrics), step))

    def log_scalar(self, *a, **k):
        raise AssertionError("one history row per report: log_metrics, not a call per scalar")


@pytest.fixture
def fake_wandb(monkeypatch):
    import sys
    import types

    import torchrl.record.loggers as loggers

    FakeWandbLogger.instances.clear()
    monkeypatch.setattr(loggers, "WandbLogger", FakeWandbLogger)
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(finish=lambda: None))
    return FakeWandbLogger.instances


def test_wandb_gets_one_row_per_report_the_config_and_the_tags(fake_wandb, tmp_path):
    from distrl.logging.metrics import MetricsWriter

    cfg = override(default_config(), **{"run.logger": "wandb"})
    w = MetricsWriter(tmp_path, "wandb", "impala-CartPole-v1-x", cfg.to_dict(), "abc")
    for i in range(3):
        w.write({"learner/fps": 1.0 + i, "learner/loss": 0.5, "actor/return_mean_100": 9.0}, step=100 * i)
    w.close()
    (logger,) = fake_wandb
    assert [step for _, step in logger.rows] == [0, 100, 200] and len(logger.rows[0][0]) == 3
    k = logger.kwargs
    assert (k["project"], k["entity"], k["group"], k["exp_name"]) == ("distrl", None, "impala", "impala-CartPole-v1-x")
    assert k["tags"] == ["impala", "CartPole-v1"] and k["config"]["algo"]["lr"] == cfg.algo.lr and k["id"] == "abc"
    cfg = override(
        cfg,
        **{
            "run.wandb_project": "p",
            "run.wandb_entity": "team",
            "run.wandb_group": "sweep1",
            "run.wandb_name": "seed3",
        },
    )
    MetricsWriter(tmp_path, "wandb", "ignored", cfg.to_dict()).close()
    k = fake_wandb[-1].kwargs
    assert (k["project"], k["entity"], k["group"], k["exp_name"]) == ("p", "team", "sweep1", "seed3")
