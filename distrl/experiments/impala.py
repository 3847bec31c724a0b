"""IMPALA experiments. ``default`` is the README's CartPole run; ``debug`` finishes in seconds."""
from __future__ import annotations

from distrl.architectures.impala import default_config as _recipe_default
from distrl.config import Config, override


def default() -> Config:
    """CartPole-v1 with 32 envs per actor; reaches 475 in well under the time budget."""
    return _recipe_default()


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{"run.env": "distrl/MatchSign-v0", "run.total_frames": 20_000, "run.max_time_s": 60.0,
           "run.eval_episodes": 10, "run.logger": "none", "algo.envs_per_actor": 8, "algo.unroll_length": 20},
    )
