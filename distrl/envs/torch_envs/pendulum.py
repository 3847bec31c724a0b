"""Pendulum as batched tensors, step for step gymnasium's ``Pendulum-v1``.

Source of truth: ``gymnasium/envs/classic_control/pendulum.py`` (gymnasium 1.x, ``g = 10``).
The angle in the state is never wrapped (only the cost normalises it), and the new velocity
is computed from the old angle: semi-implicit Euler.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchrl.data import Bounded, TensorSpec

from distrl.envs.torch_envs.base import TorchBatchedEnv

__all__ = ["TorchPendulum", "pendulum_step", "pendulum_observation", "angle_normalize"]

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
GRAVITY = 10.0
MASS = 1.0
LENGTH = 1.0


def angle_normalize(x: Tensor) -> Tensor:
    """Maps angles to ``[-pi, pi)`` as gymnasium does (``remainder`` is numpy's ``%``)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


def pendulum_step(state: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One step of the pendulum, as gymnasium's ``PendulumEnv.step``.

    Args:
        state: ``[B, 2]`` (theta, theta_dot), float32 or float64; theta 0 is upright.
        action: ``[B, 1]`` torque, clipped to [-2, 2].

    Returns:
        ``(next_state [B, 2], reward [B], terminated [B] bool)``: reward
        ``-(angle_normalize(theta)**2 + 0.1 * theta_dot**2 + 0.001 * u**2)`` on the state
        before the step and the clipped torque; terminated is always False.
    """
    th, thdot = state.unbind(-1)
    u = action[..., 0].to(state.dtype).clamp(-MAX_TORQUE, MAX_TORQUE)
    costs = angle_normalize(th).square() + 0.1 * thdot.square() + 0.001 * u.square()
    newthdot = thdot + (3 * GRAVITY / (2 * LENGTH) * torch.sin(th) + 3.0 / (MASS * LENGTH**2) * u) * DT
    newthdot = newthdot.clamp(-MAX_SPEED, MAX_SPEED)
    newth = th + newthdot * DT
    next_state = torch.stack((newth, newthdot), dim=-1)
    return next_state, -costs, torch.zeros_like(th, dtype=torch.bool)


def pendulum_observation(state: Tensor) -> Tensor:
    """``[B, 2]`` state -> ``[B, 3]`` (cos theta, sin theta, theta_dot)."""
    th, thdot = state.unbind(-1)
    return torch.stack((torch.cos(th), torch.sin(th), thdot), dim=-1)


class TorchPendulum(TorchBatchedEnv):
    """``B`` pendulums on one device; gymnasium ``Pendulum-v1`` semantics.

    Observation ``[B, 3]`` float32 (cos theta, sin theta, theta_dot); action ``[B, 1]``
    float32 torque in [-2, 2]; reward in about [-16.3, 0]; never terminates; truncated after
    200 steps. Reset theta uniform in (-pi, pi), theta_dot uniform in (-1, 1). Constructor
    arguments: see ``TorchBatchedEnv``.
    """

    gym_id = "Pendulum-v1"
    default_max_episode_steps = 200
    obs_low = (-1.0, -1.0, -MAX_SPEED)
    obs_high = (1.0, 1.0, MAX_SPEED)
    reset_low = (-math.pi, -1.0)  # (theta, theta_dot)
    reset_high = (math.pi, 1.0)
    dynamics = staticmethod(pendulum_step)
    observe = staticmethod(pendulum_observation)

    def _make_action_spec(self) -> TensorSpec:
        return Bounded(
            low=-MAX_TORQUE, high=MAX_TORQUE, shape=(self.num_envs, 1), dtype=torch.float32, device=self.device
        )
