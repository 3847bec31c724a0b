"""A user's env package, as ``--env`` finds it (docs/torchrl.md): importing this module registers
gymnasium ids (``--env tests.user_envs:PixelSign-v0``, gymnasium's ``module:EnvId``), and its
functions are TorchRL env factories (``--env tests.user_envs:pixels_channels_last``).

``PixelSign`` and ``ReachSign`` are bandits that learn in seconds: a sign is drawn every step, the agent
is paid for matching it, and every episode is cut after :data:`STEPS` steps. ``PairOfActions`` and
``TwoActions`` have actions no head of distrl's reads (the refusals' tests).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import Composite, MultiCategorical, Unbounded
from torchrl.envs import Compose, EnvBase, GymEnv, PermuteTransform, RenameTransform, StepCounter, TransformedEnv

STEPS = 20  #: every episode's length (truncated)
SIDE = 6  #: the image's height and width


class _Bandit(gym.Env):
    """What both envs share: the keywords TorchRL's ``GymEnv`` passes to ``gym.make`` (``frameskip``)."""

    def __init__(self, render_mode=None, frameskip: int = 1):
        self.render_mode = render_mode


class PixelSign(_Bandit):
    """Observations ``uint8 [SIDE, SIDE, 3]`` (channels last, as gymnasium's images are): all 255 when
    the sign is 1, all 0 when it is 0; two actions, reward 1 for the sign's."""

    observation_space = gym.spaces.Box(0, 255, (SIDE, SIDE, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.sign = 0, int(self.np_random.integers(2))
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.full(self.observation_space.shape, 255 * self.sign, np.uint8)

    def step(self, action):
        reward = float(int(action) == self.sign)
        self.t, self.sign = self.t + 1, int(self.np_random.integers(2))
        return self._obs(), reward, False, self.t >= STEPS, {}


class ReachSign(_Bandit):
    """Observation ``float32 [1]``, the sign (-1 or 1); action a ``Box(-1, 1, (1,))``; reward
    ``1 - |action - sign| / 2`` (1 for the sign, 0 for the opposite bound)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.sign = 0, float(self.np_random.choice([-1.0, 1.0]))
        return np.array([self.sign], np.float32), {}

    def step(self, action):
        reward = 1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - self.sign) / 2
        self.t, self.sign = self.t + 1, float(self.np_random.choice([-1.0, 1.0]))
        return np.array([self.sign], np.float32), reward, False, self.t >= STEPS, {}


class PairOfActions(_Bandit):
    """Two discrete choices a step (``MultiDiscrete([3, 2])``): no head of distrl's reads it."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 2])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, True, False, {}


for _id, _cls in (("PixelSign-v0", PixelSign), ("ReachSign-v0", ReachSign), ("PairOfActions-v0", PairOfActions)):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_cls)

#: not callable: ``--env tests.user_envs:NOT_AN_ENV`` names neither a factory nor an id
NOT_AN_ENV = 3


def pixels_channels_last() -> EnvBase:
    """``PixelSign-v0`` as TorchRL's ``GymEnv`` gives it: ``pixels``, ``uint8 [6, 6, 3]``, channels last."""
    return TransformedEnv(GymEnv("PixelSign-v0"), StepCounter())


def pixels_channels_first() -> EnvBase:
    """The same, channels first, as a user's transforms may leave it: ``observation``, ``uint8 [3, 6, 6]``."""
    chw = Compose(PermuteTransform((-1, -3, -2), in_keys=["pixels"]), RenameTransform(["pixels"], ["observation"]))
    return TransformedEnv(GymEnv("PixelSign-v0"), chw)


def continuous() -> EnvBase:
    """``ReachSign-v0``: a flat float observation and a one-dim ``Box`` action (``BoundedContinuous``)."""
    return TransformedEnv(GymEnv("ReachSign-v0"), StepCounter())


def continuous_unbounded() -> EnvBase:
    """The same with an ``UnboundedContinuous`` action spec (what a user's own ``EnvBase`` may declare)."""
    env = continuous()
    env.action_spec = Unbounded(env.action_spec.shape)
    return env


class TwoActions(EnvBase):
    """Two discrete actions at once (``MultiCategorical [2]``): no head of distrl's reads it. Each
    episode is one step of reward 0."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(observation=Unbounded((1,)))
        self.action_spec = MultiCategorical([3, 2])
        self.reward_spec = Unbounded((1,))

    def _reset(self, td):
        return TensorDict({"observation": torch.zeros(1)})

    def _step(self, td):
        return TensorDict(
            {"observation": torch.zeros(1), "reward": torch.zeros(1), "done": torch.ones(1, dtype=torch.bool)}
        )

    def _set_seed(self, seed):
        return seed


def two_actions() -> EnvBase:
    """:class:`TwoActions`, as a factory."""
    return TwoActions()
