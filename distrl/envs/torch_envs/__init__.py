"""Torch-native batched environments (the Isaac Gym paradigm): classic control and MinAtar.

``B`` envs live as tensors on the policy's device and step together. Each env is a TorchRL
``EnvBase`` (partial resets, seeding, specs, collectors) with a lean ``step_autoreset`` path
for on-device training loops, and its dynamics are pure functions that ``torch.compile``
accepts. Each matches its gymnasium namesake step for step (tested against gymnasium).
The MinAtar games (``TorchGridEnv``: ``[B, C, 10, 10]`` bool observations, sticky actions) match
the ``minatar`` package step for step given the same random draws.

    >>> env = make_torch_env("CartPole-v1", num_envs=4096, device="cuda", seed=0)
    >>> obs = env.reset_all()                                  # [B, 4]
    >>> next_obs, reward, terminated, truncated, obs = env.step_autoreset(action)
"""

from __future__ import annotations

import torch

from distrl.envs.torch_envs.acrobot import TorchAcrobot, acrobot_observation, acrobot_step
from distrl.envs.torch_envs.base import TorchBatchedEnv
from distrl.envs.torch_envs.cartpole import TorchCartPole, cartpole_observation, cartpole_step
from distrl.envs.torch_envs.grid import TorchGridEnv
from distrl.envs.torch_envs.minatar_asterix import TorchMinAtarAsterix
from distrl.envs.torch_envs.minatar_breakout import TorchMinAtarBreakout
from distrl.envs.torch_envs.minatar_freeway import TorchMinAtarFreeway
from distrl.envs.torch_envs.minatar_seaquest import TorchMinAtarSeaquest
from distrl.envs.torch_envs.minatar_space_invaders import TorchMinAtarSpaceInvaders
from distrl.envs.torch_envs.mountain_car import (
    TorchMountainCar,
    TorchMountainCarContinuous,
    mountain_car_continuous_step,
    mountain_car_observation,
    mountain_car_step,
)
from distrl.envs.torch_envs.pendulum import TorchPendulum, pendulum_observation, pendulum_step

__all__ = [
    "TORCH_ENV_IDS",
    "TorchAcrobot",
    "TorchBatchedEnv",
    "TorchCartPole",
    "TorchGridEnv",
    "TorchMinAtarAsterix",
    "TorchMinAtarBreakout",
    "TorchMinAtarFreeway",
    "TorchMinAtarSeaquest",
    "TorchMinAtarSpaceInvaders",
    "TorchMountainCar",
    "TorchMountainCarContinuous",
    "TorchPendulum",
    "acrobot_observation",
    "acrobot_step",
    "cartpole_observation",
    "cartpole_step",
    "make_torch_env",
    "mountain_car_continuous_step",
    "mountain_car_observation",
    "mountain_car_step",
    "pendulum_observation",
    "pendulum_step",
]

_REGISTRY: dict[str, type[TorchBatchedEnv | TorchGridEnv]] = {
    cls.gym_id: cls
    for cls in (
        TorchCartPole,
        TorchAcrobot,
        TorchMountainCar,
        TorchMountainCarContinuous,
        TorchPendulum,
        TorchMinAtarBreakout,
        TorchMinAtarSpaceInvaders,
        TorchMinAtarAsterix,
        TorchMinAtarFreeway,
        TorchMinAtarSeaquest,
    )
}

#: The gymnasium ids (MinAtar's as ``minatar`` registers them) that have a torch-native batched implementation.
TORCH_ENV_IDS: tuple[str, ...] = tuple(_REGISTRY)


def make_torch_env(
    env_id: str, num_envs: int, device: torch.device | str = "cpu", seed: int | None = None, **kwargs
) -> TorchBatchedEnv | TorchGridEnv:
    """Builds the torch-native batched version of a gymnasium env.

    Args:
        env_id: a gymnasium id from ``TORCH_ENV_IDS``, e.g. ``"CartPole-v1"``.
        num_envs: ``B``, the number of envs stepped together.
        device: where the envs live (the policy's device).
        seed: seed of the env's generator; ``None`` for a nondeterministic one.
        **kwargs: passed to the env's constructor: ``max_episode_steps`` and ``dtype``
            (classic control); ``max_episode_steps``, ``sticky_action_prob`` and ``ramping``
            (MinAtar; ``max_episode_steps=None`` there means no time limit).

    Returns:
        A ``TorchBatchedEnv`` or ``TorchGridEnv`` (a TorchRL ``EnvBase``) with
        ``batch_size == [B]``.

    Raises:
        ValueError: ``env_id`` has no torch-native implementation.
    """
    cls = _REGISTRY.get(env_id)
    if cls is None:
        raise ValueError(f"no torch-native env for {env_id!r}; known ids: {', '.join(TORCH_ENV_IDS)}")
    return cls(num_envs, device=device, seed=seed, **kwargs)
