"""CartPole as batched tensors, step for step gymnasium's ``CartPole-v1``.

Source of truth: ``gymnasium/envs/classic_control/cartpole.py`` (gymnasium 1.x), Euler
integrator, default reward (+1 on every step, the terminating one included).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchrl.data import Categorical, TensorSpec

from distrl.envs.torch_envs.base import TorchBatchedEnv

__all__ = ["TorchCartPole", "cartpole_step", "cartpole_observation"]

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
HALF_LENGTH = 0.5  # gymnasium's ``length`` is half the pole's length
POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds per step
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_HIGH = 0.05


def cartpole_step(state: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One Euler step of the cart-pole, as gymnasium's ``CartPoleEnv.step``.

    Args:
        state: ``[B, 4]`` (x, x_dot, theta, theta_dot), float32 or float64.
        action: ``[B]`` integer; 1 pushes right, anything else pushes left (as gymnasium's
            ``force_mag if action == 1 else -force_mag``).

    Returns:
        ``(next_state [B, 4], reward [B], terminated [B] bool)``; reward is 1 on every step,
        in the state's dtype.
    """
    x, x_dot, theta, theta_dot = state.unbind(-1)
    force = torch.where(action == 1, FORCE_MAG, -FORCE_MAG).to(state.dtype)
    costheta = torch.cos(theta)
    sintheta = torch.sin(theta)
    temp = (force + POLE_MASS_LENGTH * theta_dot.square() * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * costheta.square() / TOTAL_MASS)
    )
    xacc = temp - POLE_MASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    # Plain Euler: positions advance with the old velocities.
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    next_state = torch.stack((x, x_dot, theta, theta_dot), dim=-1)
    terminated = (x.abs() > X_THRESHOLD) | (theta.abs() > THETA_THRESHOLD)
    return next_state, torch.ones_like(x), terminated


def cartpole_observation(state: Tensor) -> Tensor:
    """The observation is the state itself: ``[B, 4]`` -> ``[B, 4]``."""
    return state


class TorchCartPole(TorchBatchedEnv):
    """``B`` cart-poles on one device; gymnasium ``CartPole-v1`` semantics.

    Observation ``[B, 4]`` float32 (x, x_dot, theta, theta_dot); action ``[B]`` int64 in
    {0: push left, 1: push right}; reward 1 per step; terminated when ``|x| > 2.4`` or
    ``|theta| > 12 degrees``; truncated after 500 steps. Reset state uniform in
    ``(-0.05, 0.05)^4``. Constructor arguments: see ``TorchBatchedEnv``.
    """

    gym_id = "CartPole-v1"
    default_max_episode_steps = 500
    obs_low = (-2 * X_THRESHOLD, -math.inf, -2 * THETA_THRESHOLD, -math.inf)
    obs_high = (2 * X_THRESHOLD, math.inf, 2 * THETA_THRESHOLD, math.inf)
    reset_low = (-RESET_HIGH,) * 4
    reset_high = (RESET_HIGH,) * 4
    dynamics = staticmethod(cartpole_step)
    observe = staticmethod(cartpole_observation)

    def _make_action_spec(self) -> TensorSpec:
        return Categorical(2, shape=(self.num_envs,), device=self.device)
