"""The pure helpers of ``experiments/bench_atari.py`` and ``experiments/sf2_atari.py``: parsing
Sample Factory 2's log, the ideal's arithmetic, the table. Nothing here is timed or starts SF2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from experiments import bench_atari, sf2_atari

# Two lines as SF2 2.1.1 writes them (colour codes included), the count growing at 12:00:05 and 12:00:25.
LOG = """\x1b[36m[2026-12-03 12:00:00,000][123] Fps is (10 sec: nan, 60 sec: nan, 300 sec: nan). Total num frames: 0. \
Throughput: 0: nan. Samples: 0. Policy #0 lag: (min: -1.0, avg: -1.0, max: -1.0)\x1b[0m
\x1b[36m[2026-12-03 12:00:05,000][123] Fps is (10 sec: 409.6, 60 sec: 409.6, 300 sec: 409.6). Total num frames: 4096. \
Throughput: 0: 50.0. Samples: 1024. Policy #0 lag: (min: 2.0, avg: 2.0, max: 2.0)\x1b[0m
[2026-12-03 12:00:05,001][123] Avg episode reward: [(0, '-21.000')]
\x1b[36m[2026-12-03 12:00:10,000][123] Fps is (10 sec: 0.0, 60 sec: 204.8, 300 sec: 204.8). Total num frames: 4096. \
Throughput: 0: 50.0. Samples: 2048. Policy #0 lag: (min: 2.0, avg: 2.0, max: 2.0)\x1b[0m
\x1b[36m[2026-12-03 12:00:25,000][123] Fps is (10 sec: 819.2, 60 sec: 409.6, 300 sec: 409.6). Total num frames: 12288. \
Throughput: 0: 60.0. Samples: 3072. Policy #0 lag: (min: 1.0, avg: 1.0, max: 1.0)\x1b[0m
"""


def test_sf2_reports_are_parsed_through_colour_codes():
    reports = sf2_atari.parse_reports(LOG)
    assert [(frames, samples) for _, frames, samples in reports] == [(0, 0), (4096, 1024), (4096, 2048), (12288, 3072)]
    assert reports[-1][0] - reports[0][0] == pytest.approx(25.0)


def test_sf2_rate_runs_from_first_to_last_growth_of_trained_frames():
    r = sf2_atari.rate_from_log(LOG)
    # 8192 trained frames between 12:00:05 and 12:00:25: 409.6 frames/s, 102.4 agent steps/s (frameskip 4)
    assert r["frames_per_s"] == pytest.approx(8192 / 20)
    assert r["agent_steps_per_s"] == pytest.approx(8192 / 20 / 4)
    assert r["frames"] == 12288 and r["reports"] == 4


def test_sf2_rate_is_nan_before_two_batches():
    one_batch = "\n".join(LOG.splitlines()[:3])
    r = sf2_atari.rate_from_log(one_batch)
    assert math.isnan(r["frames_per_s"]) and r["frames"] == 4096
    assert sf2_atari.rate_from_log("no report at all")["reports"] == 0


def test_sf2_missing_venv_says_how_to_make_it(tmp_path: Path):
    why = sf2_atari.missing(tmp_path / "nope")
    assert "python -m venv" in why and "sample-factory==2.1.1" in why and "ale-import-roms" in why


def test_sf2_command_keeps_atari_defaults_but_the_layout():
    cmd = sf2_atari.command(Path("/v"), Path("/t"), 2, 16, 2, ("--async_rl", "True"))
    assert cmd[:3] == ["/v/bin/python", "-m", "sf_examples.atari.train_atari"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags["--env"] == "atari_pong" and flags["--device"] == "cpu"
    assert (flags["--num_workers"], flags["--num_envs_per_worker"], flags["--worker_num_splits"]) == ("2", "16", "2")
    assert flags["--async_rl"] == "True"


def test_ideal_is_cores_over_the_summed_costs():
    us = {"env": 400.0, "inference": 250.0, "train": 850.0}  # 1.5 ms an agent step
    assert bench_atari.ideal_fps(us, 2) == pytest.approx(2 / 1.5e-3)
    assert bench_atari.ideal_fps(us, 4) == pytest.approx(2 * bench_atari.ideal_fps(us, 2))


def test_ratio_format():
    assert bench_atari.fmt_ratio(2.345) == "2.35x"
    assert bench_atari.fmt_ratio(float("nan")) == "n/a"
    assert bench_atari.fmt_ratio(float("inf")) == "n/a"


def _results() -> dict:
    net = {
        "ideal": 1000.0,
        "env_only_limit": 5000.0,
        "torchrl": {"best + PPO": 200.0},
        "torchrl_ref": 200.0,
        "sf2": {"2 workers, defaults": 250.0},
        "sf2_ref": 250.0,
        "recipes": {"sf": {"nproc": 4, "fps_running": 800.0, "fps": 700.0, "ideal": 900.0}, "apex": {"error": "boom"}},
    }
    return {"cores": 2, "seconds": 120.0, "nets": {"nature": net}}


def test_table_rows_give_fractions_and_ratios():
    rows = bench_atari.rows(_results()["nets"]["nature"])
    by_name = {r[0]: r for r in rows}
    assert by_name["ideal (d)"][1:4] == ["1,000", "4,000", "100%"]
    assert by_name["sf (4 procs)"] == ["sf (4 procs)", "800", "3,200", "80%", "89% of 900", "4.00x", "3.20x", "700"]
    assert by_name["ideal (d)"][4] == ""  # only a recipe has an ideal timed around it
    assert by_name["apex"][1] == "failed"
    assert by_name["SF2 2 workers, defaults"][6] == "1.00x"


def test_markdown_has_one_table_a_network_without_torchrl_or_sf2():
    res = _results()
    for k in ("torchrl", "torchrl_ref", "sf2", "sf2_ref"):
        del res["nets"]["nature"][k]
    md = bench_atari.markdown(res)
    assert "### nature network" in md and md.count("| ideal (d) |") == 1
    sf_row = next(line for line in md.splitlines() if line.startswith("| sf (4 procs)"))
    assert sf_row.count("n/a") == 2  # no TorchRL, no SF2 measured


def test_the_ideal_keeps_each_stages_cheapest_timing():
    before = {"env": {"cpu_us": 300.0, "wall_us": 301.0}, "train": {"cpu_us": 1000.0, "wall_us": 1001.0}}
    after = {"env": {"cpu_us": 400.0, "wall_us": 402.0}, "train": {"cpu_us": 800.0, "wall_us": 805.0}}
    best = bench_atari.cheapest(before, after)
    assert best == {"env": before["env"], "train": after["train"]}


def test_a_recipes_own_ideal_is_each_stages_mean_of_the_timings_around_it():
    before = {"env": {"cpu_us": 300.0}, "train": {"cpu_us": 1000.0}}
    after = {"env": {"cpu_us": 400.0}, "train": {"cpu_us": 800.0}}
    assert bench_atari.around(before, after) == {"env": 350.0, "train": 900.0}
    assert bench_atari.ideal_fps(bench_atari.around(before, after), 2) == pytest.approx(2e6 / 1250)
