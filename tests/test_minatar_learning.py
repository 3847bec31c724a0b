"""Each recipe family sees: a short run of its MinAtar preset on MinAtar/Breakout-v1 rises well
above a uniform-random policy (about 0.45 per episode; docs/pixels.md).

One test a family: PPO on the torch MinAtar (vecenv), V-trace actor-critic (impala; seed and sf
train with the same loss on the same images), double DQN from a prioritized replay (apex) and
A3C's asynchronous n-step gradients. Each runs its preset, without early stop, for a fixed time,
in one process (a3c in three: its workers are threads in one process, where they share the GIL);
the bar is the training mean of the last 100 episodes, twice random's. A run stops once it is
there and a greedy evaluation agrees (the bar is the run's target): the budget is a ceiling, not
a wait, and a run that never gets there fails at its end as before.
"""

from __future__ import annotations

import pytest

from helpers import read_summary

pytest.importorskip("minatar")

RANDOM = 0.45  #: a uniform-random policy's mean score on Breakout (measured: 0.4-0.5)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "recipe,seconds,nproc", [("vecenv", 35, 1), ("impala", 60, 1), ("apex", 90, 1), ("a3c", 40, 3)]
)
def test_a_short_minatar_run_beats_random_play(tmp_path, jobs, recipe, seconds, nproc):
    run = tmp_path / "run"
    proc = jobs.train(
        [
            recipe,
            "--env",
            "MinAtar/Breakout-v1",
            "--max-time-s",
            str(seconds),
            "--run-dir",
            str(run),
            "--logger",
            "none",
            "--target-return",
            str(2 * RANDOM),
            "--set",
            "run.eval_episodes=5",
        ],
        nproc=nproc,
        timeout=seconds + 150,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["env"] == "MinAtar/Breakout-v1" and s["episodes"] >= 100
    assert s["return_mean_100"] >= 2 * RANDOM, (s["return_mean_100"], s["env_frames"])
    print(
        f"\n{recipe} on MinAtar/Breakout-v1: {s['stop_reason']} after {s['wall_s']:.0f}s, "
        f"training mean {s['return_mean_100']:.2f}, greedy {s['eval_return_mean']}"
    )
