"""What an ``--env`` names, before anything is built: a gymnasium id or a TorchRL env factory
(:func:`is_factory`), and the sizes every role asks of it (:class:`EnvInfo`).

It imports nothing of distrl: ``gym.py`` (gymnasium ids) and ``torchrl_env.py`` (factories) both
build on it, and ``gym.py`` hands a factory to ``torchrl_env.py``, never the other way round.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvInfo:
    """Shapes of one env: ``obs_dim`` features, and ``num_actions`` for discrete action spaces."""

    obs_dim: int
    num_actions: int | None  # None for continuous actions
    action_dim: int
    #: how a TorchRL env takes discrete actions: "one_hot" (``OneHot``) or "categorical" (indices);
    #: None for a gymnasium id and for continuous actions
    action_encoding: str | None = None


def is_factory(env: str) -> bool:
    """Whether ``--env`` names a TorchRL env factory (``module:function``, distrl/envs/torchrl_env.py)
    rather than a gymnasium id. gymnasium ids may carry a module too (``ale_py:ALE/Pong-v5``); the
    part after a factory's colon is a Python name, which an env id (``Name-vN``) is not."""
    module, sep, name = env.partition(":")
    return bool(sep and module) and all(part.isidentifier() for part in name.split("."))
