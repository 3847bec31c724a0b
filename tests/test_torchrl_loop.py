"""experiments/torchrl_loop.py, short: TorchRL's ClipPPOLoss + GAE learns the toy env from a distrl fleet."""

from __future__ import annotations

from experiments.torchrl_loop import train
from helpers import live_threads, threads_left


def test_the_torchrl_loop_learns_the_toy_env(training):
    before = live_threads()  # earlier tests' idle threads are theirs, not this fleet's
    # MatchSign: 20 steps, reward 1 for matching the sign; uniform play scores 10, the best 20.
    r = train(
        env="distrl/MatchSign-v0",
        total_frames=6_400,
        envs_per_actor=8,
        unroll_length=20,
        lr=3e-3,
        gamma=0.9,
        log_interval_s=1e9,
    )
    assert r["frames"] == 6_400
    assert r["eval_return"] >= 18.0, r
    assert 0.0 <= r["lag_mean"] < 5.0, r  # off-policy by a few versions, bounded by the queue
    assert not threads_left(before)
