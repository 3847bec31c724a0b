"""Sample Factory experiments. ``default`` is the CartPole run; ``debug`` finishes in seconds."""
from __future__ import annotations

from distrl.architectures.sf import default_config as _recipe_default
from distrl.config import Config, override


def default() -> Config:
    """CartPole-v1: 2 groups of 128 envs per rollout worker, 64 trajectories of 32 steps per update."""
    return _recipe_default()


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{"run.env": "distrl/MatchSign-v0", "run.total_frames": 20_000, "run.max_time_s": 60.0,
           "run.eval_episodes": 10, "run.logger": "none", "algo.envs_per_worker": 16, "algo.unroll_length": 20,
           "algo.batch_size": 16},
    )
