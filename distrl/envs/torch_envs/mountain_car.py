"""MountainCar (discrete and continuous) as batched tensors, step for step gymnasium's
``MountainCar-v0`` and ``MountainCarContinuous-v0``.

Sources of truth: ``gymnasium/envs/classic_control/mountain_car.py`` and
``continuous_mountain_car.py`` (gymnasium 1.x). The two differ in more than the action: the
goal is at 0.5 for the discrete car and 0.45 for the continuous one. The continuous car clips
the action to [-1, 1] first and charges ``0.1 * action**2`` on the clipped action: gymnasium's
code charges the action as given, but distrl's gymnasium and TorchRL backends clip to the action
space before stepping, so the same config trains on the same reward whatever the backend.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchrl.data import Bounded, Categorical, TensorSpec

from distrl.envs.torch_envs.base import TorchBatchedEnv

__all__ = [
    "TorchMountainCar",
    "TorchMountainCarContinuous",
    "mountain_car_step",
    "mountain_car_continuous_step",
    "mountain_car_observation",
]

MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GRAVITY = 0.0025
FORCE = 0.001  # discrete car: velocity change per unit of (action - 1)
POWER = 0.0015  # continuous car: velocity change per unit of force
GOAL_POSITION = 0.5
GOAL_POSITION_CONTINUOUS = 0.45
GOAL_VELOCITY = 0.0
RESET_LOW, RESET_HIGH = -0.6, -0.4


def _move(state: Tensor, push: Tensor, goal_position: float) -> tuple[Tensor, Tensor]:
    """Shared car physics.

    Args:
        state: ``[B, 2]`` (position, velocity).
        push: ``[B]`` velocity change from the engine this step.
        goal_position: where the episode ends (with non-negative velocity).

    Returns:
        ``(next_state [B, 2], terminated [B] bool)``.
    """
    position, velocity = state.unbind(-1)
    velocity = velocity + push - GRAVITY * torch.cos(3 * position)
    velocity = velocity.clamp(-MAX_SPEED, MAX_SPEED)
    position = (position + velocity).clamp(MIN_POSITION, MAX_POSITION)
    # The left wall is inelastic: hitting it stops the car.
    velocity = torch.where((position == MIN_POSITION) & (velocity < 0), torch.zeros_like(velocity), velocity)
    terminated = (position >= goal_position) & (velocity >= GOAL_VELOCITY)
    return torch.stack((position, velocity), dim=-1), terminated


def mountain_car_step(state: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One step of the discrete car, as gymnasium's ``MountainCarEnv.step``.

    Args:
        state: ``[B, 2]`` (position, velocity), float32 or float64.
        action: ``[B]`` integer in {0: push left, 1: no push, 2: push right}.

    Returns:
        ``(next_state [B, 2], reward [B], terminated [B] bool)``; reward -1 per step.
    """
    push = (action.to(state.dtype) - 1.0) * FORCE
    next_state, terminated = _move(state, push, GOAL_POSITION)
    return next_state, torch.full_like(push, -1.0), terminated


def mountain_car_continuous_step(state: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One step of the continuous car, as gymnasium's ``Continuous_MountainCarEnv.step``.

    Args:
        state: ``[B, 2]`` (position, velocity), float32 or float64.
        action: ``[B, 1]`` force; clipped to [-1, 1] (the action space) before anything else.

    Returns:
        ``(next_state [B, 2], reward [B], terminated [B] bool)``: reward
        ``100 * terminated - 0.1 * action**2`` with the clipped action.
    """
    action = action[..., 0].to(state.dtype).clamp(-1.0, 1.0)
    next_state, terminated = _move(state, action * POWER, GOAL_POSITION_CONTINUOUS)
    reward = 100.0 * terminated.to(state.dtype) - 0.1 * action.square()
    return next_state, reward, terminated


def mountain_car_observation(state: Tensor) -> Tensor:
    """The observation is the state itself: ``[B, 2]`` -> ``[B, 2]``."""
    return state


class _MountainCarBase(TorchBatchedEnv):
    obs_low = (MIN_POSITION, -MAX_SPEED)
    obs_high = (MAX_POSITION, MAX_SPEED)
    # The velocity's range is empty: it starts at exactly 0.
    reset_low = (RESET_LOW, 0.0)
    reset_high = (RESET_HIGH, 0.0)
    observe = staticmethod(mountain_car_observation)


class TorchMountainCar(_MountainCarBase):
    """``B`` discrete mountain cars on one device; gymnasium ``MountainCar-v0`` semantics.

    Observation ``[B, 2]`` float32 (position, velocity); action ``[B]`` int64 in
    {0: left, 1: none, 2: right}; reward -1 per step; terminated at position >= 0.5 with
    velocity >= 0; truncated after 200 steps. Reset position uniform in (-0.6, -0.4),
    velocity 0. Constructor arguments: see ``TorchBatchedEnv``.
    """

    gym_id = "MountainCar-v0"
    default_max_episode_steps = 200
    dynamics = staticmethod(mountain_car_step)

    def _make_action_spec(self) -> TensorSpec:
        return Categorical(3, shape=(self.num_envs,), device=self.device)


class TorchMountainCarContinuous(_MountainCarBase):
    """``B`` continuous mountain cars; gymnasium ``MountainCarContinuous-v0`` semantics.

    Observation ``[B, 2]`` float32 (position, velocity); action ``[B, 1]`` float32 in
    [-1, 1]; reward ``100`` on reaching position >= 0.45 with velocity >= 0, minus
    ``0.1 * action**2`` every step; truncated after 999 steps. Reset as ``MountainCar-v0``.
    Constructor arguments: see ``TorchBatchedEnv``.
    """

    gym_id = "MountainCarContinuous-v0"
    default_max_episode_steps = 999
    dynamics = staticmethod(mountain_car_continuous_step)

    def _make_action_spec(self) -> TensorSpec:
        return Bounded(low=-1.0, high=1.0, shape=(self.num_envs, 1), dtype=torch.float32, device=self.device)
