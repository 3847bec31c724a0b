"""Factories the door-1 tests name with ``--env tests.door1_factories:NAME``: envs distrl must
refuse in one line (the good ones are in ``distrl/envs/torchrl_factories.py``)."""

from __future__ import annotations

from torchrl.envs import GymEnv, TransformedEnv, UnsqueezeTransform


def raises():
    raise RuntimeError("this factory always fails")


def image_like():
    """An observation of shape [1, 4]: not flat."""
    return TransformedEnv(GymEnv("CartPole-v1"), UnsqueezeTransform(dim=-2, in_keys=["observation"]))


def not_an_env():
    import gymnasium as gym

    return gym.make("CartPole-v1")
