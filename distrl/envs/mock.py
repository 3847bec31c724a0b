"""Deterministic toy envs for tests, registered with gymnasium on import.

``distrl/MatchSign-v0``: the observation is one number, +1 or -1, drawn from the env's seeded
generator; action 1 earns reward 1 when it is +1, action 0 when it is -1. Episodes last 20 steps
(a truncation), so the best return is 20 and a uniform policy scores 10. It learns in a few
thousand frames, which makes it the integration tests' env: a real learning signal, in seconds.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class MatchSignEnv(gym.Env):
    """See the module docstring."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 20):
        self.length = length
        self._t = 0
        self._sign = 1.0

    def _obs(self):
        self._sign = float(self.np_random.choice([-1.0, 1.0]))
        return np.array([self._sign], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        reward = 1.0 if (int(action) == 1) == (self._sign > 0) else 0.0
        self._t += 1
        return self._obs(), reward, False, self._t >= self.length, {}


if "distrl/MatchSign-v0" not in gym.registry:
    gym.register("distrl/MatchSign-v0", entry_point=MatchSignEnv)
