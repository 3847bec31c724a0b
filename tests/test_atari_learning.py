"""Atari learning, end to end: ``sf``'s ``atari`` preset on a real ALE game, under torchrun, lifts
the training return well above what a uniform-random or a frozen policy scores.

Breakout, not Pong: Pong's return stays at -20.x for the first ~0.5M agent steps under any PPO
(CleanRL's published curve: -19.1 at 0.5M), minutes here; Breakout's moves within ~100k. The
training episodes are whole games of ``ALE/Breakout-v5`` (sticky actions 0.25, episodic life off:
the preset's), their rewards clipped, so a game's return counts the bricks hit. The budget is in
agent steps, so a slower machine takes longer but sees the same learning; the run stops early
once the training mean of the last 100 games is over the bar and a full-game evaluation agrees.
"""

from __future__ import annotations

import pytest

from helpers import read_summary

pytest.importorskip("ale_py")
pytest.importorskip("cv2")

#: a uniform-random policy's training return on this env, clipped points a whole game (measured
#: over 300 games of 16 envs, sticky actions 0.25: 1.27, standard error 0.08; the untrained preset
#: network samples actions all but uniformly: its first games score 1.1-1.3)
RANDOM = 1.27
#: 1.6x random: a mean of 100 random games is 1.27 +- 0.13 (1 sd), so 2.03 is ~6 sd above it
BAR = 1.6 * RANDOM
#: agent steps of training at most: on 2026-12-06 (seed 0) sf's preset trained 100 games to a mean of 2.12 by
#: 51k agent steps (169 s, the machine shared; SF2's settings, docs/atari.md); the preset before them to a
#: mean of 2.04 by 110k agent steps (108 s), 2.3 by 200k and 2.6 by 300k (docs/atari.md, "The test")
FRAMES = 250_000


@pytest.mark.timeout(720)
def test_a_few_minutes_of_sf_lift_breakout_well_above_random_play(tmp_path, jobs):
    run = tmp_path / "run"
    args = ["sf", "--env", "ALE/Breakout-v5", "--total-frames", FRAMES, "--max-time-s", 480, "--run-dir", run,
            "--logger", "none", "--target-return", BAR, "--set", "run.eval_episodes=2"]  # fmt: skip
    proc = jobs.train(args, nproc=4, timeout=660)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["episodes"] >= 100, s["episodes"]
    assert s["return_mean_100"] >= BAR, (s["return_mean_100"], s["env_frames"], s["stop_reason"])
    print(
        f"\nsf on ALE/Breakout-v5: {s['stop_reason']} after {s['wall_s']:.0f}s and {s['env_frames']:,} agent "
        f"steps, training mean {s['return_mean_100']:.2f} (random {RANDOM}), evaluation {s['eval_return_mean']}"
    )
