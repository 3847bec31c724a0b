"""Partially observed envs, registered with gymnasium on import.

``distrl/CartPoleNoVel-v1``: CartPole-v1 (same dynamics, 500-step limit, threshold 475) whose
observation keeps the cart position and the pole angle and hides both velocities. A memoryless
policy cannot tell a pole falling left from one rising left, so it tests a recurrent core: the
velocities have to be inferred from consecutive observations. Deterministic given the seed,
like CartPole itself.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

VISIBLE = (0, 2)  #: indices kept from CartPole's (x, x_dot, theta, theta_dot)


class CartPoleNoVelEnv(CartPoleEnv):
    """CartPole whose observation ``[2]`` is ``(x, theta)``; see the module docstring."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        idx = list(VISIBLE)
        space = self.observation_space
        self.observation_space = gym.spaces.Box(space.low[idx], space.high[idx], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs[list(VISIBLE)], info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[list(VISIBLE)], reward, terminated, truncated, info


if "distrl/CartPoleNoVel-v1" not in gym.registry:
    gym.register("distrl/CartPoleNoVel-v1", entry_point=CartPoleNoVelEnv, max_episode_steps=500, reward_threshold=475.0)
