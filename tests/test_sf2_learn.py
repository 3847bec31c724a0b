"""The pure parts of ``experiments/sf2_learn.py``: reading Sample Factory 2's checkpoint names and
log, the records of ``results.json`` and the command it gives SF2. Nothing here starts SF2 or needs
its venv (the child, ``experiments/sf2_child.py``, imports SF2 and is not imported here)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from experiments import sf2_atari, sf2_learn

# An SF2 2.1.1 log as it reads (colour codes included): a report before the first batch, the first
# trained batch's report at 12:00:05, a periodic save at 12:01:00 and the save SIGINT brings at 12:02:30.
LOG = """\x1b[36m[2026-12-03 12:00:00,000][123] Fps is (10 sec: nan, 60 sec: nan, 300 sec: nan). Total num frames: 0. \
Throughput: 0: nan. Samples: 0. Policy #0 lag: (min: -1.0, avg: -1.0, max: -1.0)\x1b[0m
\x1b[36m[2026-12-03 12:00:05,000][123] Fps is (10 sec: 409.6, 60 sec: 409.6, 300 sec: 409.6). Total num frames: 4096. \
Throughput: 0: 50.0. Samples: 1024. Policy #0 lag: (min: 2.0, avg: 2.0, max: 2.0)\x1b[0m
[2026-12-03 12:01:00,250][456] Saving /r/sf2/learn/checkpoint_p0/checkpoint_000000040_163840.pth...
[2026-12-03 12:02:30,500][456] Saving /r/sf2/learn/checkpoint_p0/checkpoint_000000105_430080.pth...
"""


def unix(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def flags(cmd: list[str]) -> dict[str, str]:
    """A command's ``--flag value`` pairs after ``python -m module``."""
    return dict(zip(cmd[3::2], cmd[4::2]))


def test_a_checkpoint_name_gives_the_train_step_and_the_trained_frames():
    assert sf2_learn.checkpoint_steps("checkpoint_000000040_163840.pth") == (40, 163840)
    assert sf2_learn.checkpoint_steps("/r/checkpoint_p0/checkpoint_000001234_5.pth") == (1234, 5)
    with pytest.raises(ValueError, match="not an SF2 checkpoint"):
        sf2_learn.checkpoint_steps("checkpoint_temp")  # SF2 writes this one first, then renames it


def test_the_log_gives_each_checkpoints_save_time_and_the_first_batch():
    saves = sf2_learn.saved_at(LOG)
    assert saves == {
        "checkpoint_000000040_163840.pth": unix("2026-12-03 12:01:00,250"),
        "checkpoint_000000105_430080.pth": unix("2026-12-03 12:02:30,500"),
    }
    assert sf2_learn.first_batch_at(LOG) == unix("2026-12-03 12:00:05,000")  # not the report with 0 frames
    assert sf2_learn.first_batch_at(LOG.splitlines()[0]) is None


def test_a_record_counts_agent_steps_as_frames_over_the_frameskip():
    first = unix("2026-12-03 12:00:05,000")
    evaluation = {"checkpoint": "/x", "scores": [-21.0, -20.0], "mean": -20.5, "median": -20.5, "min": -21.0}
    evaluation["max"] = -20.0
    r = sf2_learn.record("checkpoint_000000040_163840.pth", first + 55.25, first, first - 30.0, evaluation)
    assert r["agent_steps"] == 163840 // 4 == 40960 and sf2_atari.FRAMESKIP == 4
    assert (r["train_step"], r["env_frames"]) == (40, 163840)
    assert (r["wall_s"], r["since_launch_s"]) == (55.2, 85.2)
    assert r["scores"] == [-21.0, -20.0] and (r["mean"], r["median"], r["min"], r["max"]) == (-20.5, -20.5, -21, -20)
    assert "40,960 agent steps" in sf2_learn.line(r) and "(2 games)" in sf2_learn.line(r)


def test_names_and_the_default_out_dir():
    assert sf2_learn.rom("ALE/Pong-v5") == "Pong" and sf2_learn.rom("ALE/Breakout-v5") == "Breakout"
    assert sf2_learn.sf2_env("ALE/Breakout-v5") == "atari_breakout_v5"
    assert sf2_learn.default_out("ALE/Pong-v5", 3) == sf2_atari.ROOT / "runs" / "sf2_learn" / "pong_seed3"


def test_the_command_is_the_atari_example_through_the_child_saving_every_checkpoint():
    layout = next(iter(sf2_atari.LAYOUTS))  # the Atari defaults: one env a worker
    cmd = sf2_learn.train_command(Path("/v"), Path("/t"), "ALE/Breakout-v5", 7, 2, layout, 0.25, 60)
    assert cmd[:3] == ["/v/bin/python", "-m", "experiments.sf2_child"]
    f = flags(cmd)
    assert f["--env"] == "atari_breakout_v5" and f["--ale_id"] == "ALE/Breakout-v5"
    assert (f["--sticky_actions"], f["--seed"], f["--device"]) == ("0.25", "7", "cpu")
    assert (f["--num_workers"], f["--num_envs_per_worker"], f["--worker_num_splits"]) == ("2", "1", "1")
    assert f["--save_every_sec"] == "60" and int(f["--keep_checkpoints"]) >= 10_000
    assert (f["--train_dir"], f["--experiment"]) == ("/t", "learn")
    assert "--async_rl" not in f  # the Atari defaults' sync PPO
    async_layout = "16 envs a worker, 2 splits, async"
    assert async_layout in sf2_atari.LAYOUTS
    f = flags(sf2_learn.train_command(Path("/v"), Path("/t"), "ALE/Pong-v5", 0, 2, async_layout, 0.25, 60))
    assert f["--async_rl"] == "True" and f["--num_envs_per_worker"] == "16"


def test_a_missing_venv_is_one_line_naming_both_roms(tmp_path: Path):
    why = sf2_atari.missing(tmp_path / "nope", "Breakout")
    assert "\n" not in why and "pong.bin" in why and "breakout.bin" in why
