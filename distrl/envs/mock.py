"""Deterministic toy envs for tests, registered with gymnasium on import.

``distrl/MatchSign-v0``: the observation is one number, +1 or -1, drawn from the env's seeded
generator; action 1 earns reward 1 when it is +1, action 0 when it is -1. Episodes last 20 steps
(a truncation), so the best return is 20 and a uniform policy scores 10. It learns in a few
thousand frames, which makes it the integration tests' env: a real learning signal, in seconds.

``distrl/MaskedPick-v0``: an action-masked env (docs/action-masks.md). Four actions; each step each
is legal with probability 1/2 (at least one is), and the observation is a one-hot ``[4]`` of a
target action, drawn uniformly, so legal only half the time. A legal action earns 1 if it is the
target, else 0; an illegal one earns -1 and ends the episode. Episodes last at most 20 steps. The
same env three ways: ``MaskedPick-v0`` gives the mask in a Dict observation ``{observation,
action_mask}``, ``MaskedPickInfo-v0`` in ``info["action_mask"]``, and ``MaskedPickBlind-v0`` not
at all (the unmasked baseline). With the mask a uniform legal policy scores about 5 and the best
about 10.6 (the target whenever it is legal); without it even the best policy is punished within
a step or two, about 0.1.
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


class MaskedPickEnv(gym.Env):
    """See the module docstring; ``mask`` is ``"obs"`` (Dict observation), ``"info"`` or ``"none"``."""

    action_space = gym.spaces.Discrete(4)

    def __init__(self, mask: str = "obs", length: int = 20):
        self.mask, self.length = mask, length
        obs = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        self.observation_space = (
            gym.spaces.Dict({"observation": obs, "action_mask": gym.spaces.MultiBinary(4)}) if mask == "obs" else obs
        )
        self._t, self._target, self._legal = 0, 0, np.ones(4, dtype=np.int8)

    def _draw(self):
        legal = (self.np_random.random(4) < 0.5).astype(np.int8)
        if not legal.any():
            legal[self.np_random.integers(4)] = 1
        self._legal, self._target = legal, int(self.np_random.integers(4))
        obs = np.zeros(4, np.float32)
        obs[self._target] = 1.0
        if self.mask == "obs":
            return {"observation": obs, "action_mask": legal.copy()}, {}
        return obs, ({"action_mask": legal.astype(bool)} if self.mask == "info" else {})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._draw()

    def step(self, action):
        action, self._t = int(action), self._t + 1
        if not self._legal[action]:
            obs, info = self._draw()
            return obs, -1.0, True, False, {**info, "illegal": True}
        reward = 1.0 if action == self._target else 0.0
        obs, info = self._draw()
        return obs, reward, False, self._t >= self.length, info


for _name, _mask in (("MaskedPick", "obs"), ("MaskedPickInfo", "info"), ("MaskedPickBlind", "none")):
    if f"distrl/{_name}-v0" not in gym.registry:
        gym.register(f"distrl/{_name}-v0", entry_point=MaskedPickEnv, kwargs={"mask": _mask})
