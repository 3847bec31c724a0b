"""A3C experiments. ``default`` is the CartPole run; ``debug`` finishes in seconds; ``a2c`` and
``debug_a2c`` are the same with the synchronous switch on, for side-by-side runs."""
from __future__ import annotations

from distrl.architectures.a3c import default_config as _recipe_default
from distrl.config import Config, override


def default() -> Config:
    """CartPole-v1: 32 envs per worker, t_max 32 (1024 frames per gradient push)."""
    return _recipe_default()


def a2c() -> Config:
    """``default`` made synchronous: one mean gradient per round of every live worker."""
    return override(default(), **{"algo.sync": True})


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{"run.env": "distrl/MatchSign-v0", "run.total_frames": 20_000, "run.max_time_s": 60.0,
           "run.eval_episodes": 10, "run.logger": "none", "algo.envs_per_worker": 8, "algo.t_max": 20},
    )


def debug_a2c() -> Config:
    """``debug`` with ``algo.sync``."""
    return override(debug(), **{"algo.sync": True})
