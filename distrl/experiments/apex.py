"""Ape-X experiments. ``default`` is the CartPole run; ``debug`` finishes in seconds."""
from __future__ import annotations

from distrl.architectures.apex import default_config as _recipe_default
from distrl.config import Config, override


def default() -> Config:
    """CartPole-v1: 1 replay shard, 16 envs per actor, 3-step double DQN."""
    return _recipe_default()


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{"run.env": "distrl/MatchSign-v0", "run.total_frames": 12_000, "run.max_time_s": 60.0,
           "run.eval_episodes": 10, "run.logger": "none", "algo.envs_per_actor": 8, "algo.unroll_length": 10,
           "algo.min_replay_size": 500, "algo.batch_size": 64, "algo.target_update_interval": 50,
           "algo.samples_per_insert": 4.0, "algo.spi_tolerance": 1000.0, "net.hidden": (32,), "algo.lr": 1e-3,
           "algo.gamma": 0.5},  # the toy env is a bandit: a short horizon makes the action gap large
    )
