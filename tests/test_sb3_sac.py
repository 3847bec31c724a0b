"""The pure parts of ``experiments/sb3_sac.py``: rl-zoo3's entries and value strings, checkpoint
names, the save-and-stop clock and the records of ``results.json``; then one short end-to-end run,
which needs Stable-Baselines3's venv and is skipped without it (CI's fresh checkout has none)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from experiments import sb3_sac
from helpers import ROOT, child_env


def test_a_v5_id_takes_the_zoos_v4_mujoco_entry():
    key, entry = sb3_sac.zoo_entry("HalfCheetah-v5")
    assert key == "HalfCheetah-v4" and entry == {"n_timesteps": 1e6, "policy": "MlpPolicy", "learning_starts": 10_000}
    assert sb3_sac.zoo_entry("Hopper-v5") == ("Hopper-v4", entry)  # <<: *mujoco-defaults, nothing added
    assert sb3_sac.zoo_entry("Hopper-v4")[0] == "Hopper-v4"
    entry["learning_starts"] = 1  # a copy: the table stays as the zoo wrote it
    assert sb3_sac.ZOO_SAC["HalfCheetah-v4"]["learning_starts"] == 10_000
    with pytest.raises(ValueError, match="no rl-zoo3 SAC entry for Ant-v5"):
        sb3_sac.zoo_entry("Ant-v5")


def test_sacs_arguments_are_the_entry_less_policy_and_n_timesteps():
    assert sb3_sac.sac_kwargs(sb3_sac.ZOO_SAC["HalfCheetah-v4"]) == {"learning_starts": 10_000}
    kwargs = sb3_sac.sac_kwargs({"policy": "MlpPolicy", "learning_rate": "lin_7.3e-4", "ent_coef": "auto"})
    assert kwargs == {"learning_rate": sb3_sac.LinearSchedule(7.3e-4), "ent_coef": "auto"}


def test_lin_strings_are_linear_schedules_to_zero_as_the_zoo_reads_them():
    schedule = sb3_sac.zoo_value("lin_7.3e-4")
    assert isinstance(schedule, sb3_sac.LinearSchedule) and schedule.initial == 7.3e-4
    assert schedule(1.0) == 7.3e-4 and schedule(0.5) == pytest.approx(3.65e-4) and schedule(0.0) == 0.0
    assert sb3_sac.zoo_value(3e-4) == 3e-4 and sb3_sac.zoo_value("auto") == "auto"


def test_a_checkpoint_name_gives_back_its_env_steps_and_wall_time():
    name = sb3_sac.checkpoint_name(12_345, 60.24)
    assert name == "sac_00012345_00060.2s.zip"
    assert sb3_sac.checkpoint_info(name) == (12_345, 60.2)
    assert sb3_sac.checkpoint_info(Path("/r/checkpoints") / name) == (12_345, 60.2)
    names = [sb3_sac.checkpoint_name(s, t) for s, t in [(120_000, 1800.0), (9_000, 120.1), (45_000, 600.5)]]
    assert sorted(names) == sorted(names, key=sb3_sac.checkpoint_info)  # by name is by env steps
    with pytest.raises(ValueError, match="not a checkpoint"):
        sb3_sac.checkpoint_info("sac_12345.zip")


def test_the_clock_saves_every_interval_once_and_stops_with_a_save_at_the_budget():
    clock = sb3_sac.Clock(budget_s=30.0, every_s=10.0)
    clock.start(100.0)
    ticks = {t: clock.tick(100.0 + t) for t in (0.0, 9.9, 10.0, 10.5, 19.0, 31.0)}
    assert ticks == {
        0.0: (False, False),
        9.9: (False, False),
        10.0: (True, False),
        10.5: (False, False),  # the 10 s save was made
        19.0: (False, False),
        31.0: (True, True),  # the stop saves, whatever the interval
    }
    late = sb3_sac.Clock(budget_s=100.0, every_s=10.0)
    late.start(0.0)
    assert late.tick(35.0) == (True, False) and late.tick(36.0) == (False, False)  # one save for 10, 20, 30
    with pytest.raises(ValueError, match="must be positive"):
        sb3_sac.Clock(budget_s=60.0, every_s=0.0)


def test_a_record_has_the_checkpoints_time_steps_and_every_return():
    r = sb3_sac.record("sac_00045000_00600.5s.zip", [1000.0, 3000.0, 2500.0])
    assert (r["wall_s"], r["env_steps"]) == (600.5, 45_000)
    assert (r["mean"], r["median"], r["returns"]) == (2166.6666666666665, 2500.0, [1000.0, 3000.0, 2500.0])
    assert json.loads(json.dumps(r)) == r
    assert sb3_sac.line(r) == "  600.5 s     45,000 env steps: mean    2166.7  median    2500.0  (3 episodes)"


def test_the_default_out_dir_and_the_venv_recipe():
    assert sb3_sac.default_out("HalfCheetah-v5", 0) == ROOT / "runs" / "sb3_sac" / "halfcheetah_s0"
    assert sb3_sac.default_out("Hopper-v5", 2).name == "hopper_s2"
    make = sb3_sac.MAKE_VENV.format(venv=".venv-sb3")
    assert make.startswith("python -m venv --system-site-packages .venv-sb3 && ")  # torch, gymnasium, mujoco reused
    assert make.endswith(".venv-sb3/bin/pip install stable-baselines3==2.9.2")  # and nothing that replaces torch


@pytest.mark.skipif(
    not (sb3_sac.DEFAULT_VENV / "bin" / "python").exists(), reason="no Stable-Baselines3 venv (.venv-sb3)"
)
def test_a_four_second_run_saves_stops_and_scores_every_checkpoint(jobs, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "experiments.sb3_sac", "--env", "HalfCheetah-v5", "--budget-s", "4"]
    cmd += ["--eval-every-s", "2", "--eval-episodes", "1", "--out", str(out)]
    job = jobs.start(cmd, env=child_env())
    assert job.wait(180) == 0, job.tail()
    results = json.loads((out / "results.json").read_text())
    walls = [r["wall_s"] for r in results["checkpoints"]]
    assert len(walls) == 2 and 4.0 <= walls[-1] < 6.0, walls  # at 2 s, then the stop's at 4 s
    assert all(len(r["returns"]) == 1 for r in results["checkpoints"])
    assert results["sb3_settings"]["learning_starts"] == 10_000 and results["torch_threads"] == 1
