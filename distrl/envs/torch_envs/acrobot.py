"""Acrobot as batched tensors, step for step gymnasium's ``Acrobot-v1``.

Source of truth: ``gymnasium/envs/classic_control/acrobot.py`` (gymnasium 1.x): the "book"
dynamics, one RK4 step of ``dt = 0.2`` with the torque held constant, no torque noise.
Gymnasium integrates in float64; in float32 one step agrees to about 1e-6, but the system is
chaotic, so long open-loop trajectories drift apart whatever the dtype (pass
``dtype=torch.float64`` to track gymnasium more closely).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchrl.data import Categorical, TensorSpec

from distrl.envs.torch_envs.base import TorchBatchedEnv

__all__ = ["TorchAcrobot", "acrobot_step", "acrobot_observation", "acrobot_dsdt"]

DT = 0.2
LINK_LENGTH_1 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0
GRAVITY = 9.8
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi
RESET_HIGH = 0.1


def acrobot_dsdt(state: Tensor, torque: Tensor) -> Tensor:
    """Time derivative of the state (gymnasium's ``_dsdt``, "book" variant).

    Args:
        state: ``[B, 4]`` (theta1, theta2, dtheta1, dtheta2).
        torque: ``[B]`` torque on the second joint.

    Returns:
        ``[B, 4]`` (dtheta1, dtheta2, ddtheta1, ddtheta2).
    """
    m1, m2, l1 = LINK_MASS_1, LINK_MASS_2, LINK_LENGTH_1
    lc1, lc2, i1, i2, g = LINK_COM_POS_1, LINK_COM_POS_2, LINK_MOI, LINK_MOI, GRAVITY
    theta1, theta2, dtheta1, dtheta2 = state.unbind(-1)
    cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + i2
    phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2.square() * sin2
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
        + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
        + phi2
    )
    ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1.square() * sin2 - phi2) / (
        m2 * lc2**2 + i2 - d2.square() / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), dim=-1)


def _wrap(x: Tensor, low: float, high: float) -> Tensor:
    """Gymnasium's ``wrap``: shift by whole periods until ``low <= x <= high``.

    In-range values are returned untouched (a plain ``remainder`` would perturb them by a
    rounding error and map ``high`` to ``low``).
    """
    period = high - low
    above = torch.ceil((x - high) / period).clamp(min=0)
    below = torch.ceil((low - x) / period).clamp(min=0)
    return x - above * period + below * period


def acrobot_step(state: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One step of the acrobot, as gymnasium's ``AcrobotEnv.step``.

    Args:
        state: ``[B, 4]`` (theta1, theta2, dtheta1, dtheta2), float32 or float64.
        action: ``[B]`` integer in {0, 1, 2}: torque -1, 0, +1.

    Returns:
        ``(next_state [B, 4], reward [B], terminated [B] bool)``: reward -1 per step and 0
        on the step that reaches the goal height.
    """
    torque = action.to(state.dtype) - 1.0
    half = DT / 2.0
    k1 = acrobot_dsdt(state, torque)
    k2 = acrobot_dsdt(state + half * k1, torque)
    k3 = acrobot_dsdt(state + half * k2, torque)
    k4 = acrobot_dsdt(state + DT * k3, torque)
    ns = state + DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    theta1, theta2, dtheta1, dtheta2 = ns.unbind(-1)
    theta1 = _wrap(theta1, -math.pi, math.pi)
    theta2 = _wrap(theta2, -math.pi, math.pi)
    dtheta1 = dtheta1.clamp(-MAX_VEL_1, MAX_VEL_1)
    dtheta2 = dtheta2.clamp(-MAX_VEL_2, MAX_VEL_2)
    next_state = torch.stack((theta1, theta2, dtheta1, dtheta2), dim=-1)
    terminated = -torch.cos(theta1) - torch.cos(theta2 + theta1) > 1.0
    reward = terminated.to(state.dtype) - 1.0
    return next_state, reward, terminated


def acrobot_observation(state: Tensor) -> Tensor:
    """``[B, 4]`` state -> ``[B, 6]`` (cos t1, sin t1, cos t2, sin t2, dt1, dt2)."""
    theta1, theta2, dtheta1, dtheta2 = state.unbind(-1)
    return torch.stack(
        (torch.cos(theta1), torch.sin(theta1), torch.cos(theta2), torch.sin(theta2), dtheta1, dtheta2), dim=-1
    )


class TorchAcrobot(TorchBatchedEnv):
    """``B`` acrobots on one device; gymnasium ``Acrobot-v1`` semantics.

    Observation ``[B, 6]`` float32; action ``[B]`` int64 in {0, 1, 2} (torque -1, 0, +1);
    reward -1 per step, 0 on reaching the goal; terminated when the tip rises one link length
    above the pivot; truncated after 500 steps. Reset state uniform in ``(-0.1, 0.1)^4``.
    Constructor arguments: see ``TorchBatchedEnv``.
    """

    gym_id = "Acrobot-v1"
    default_max_episode_steps = 500
    obs_low = (-1.0, -1.0, -1.0, -1.0, -MAX_VEL_1, -MAX_VEL_2)
    obs_high = (1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2)
    reset_low = (-RESET_HIGH,) * 4
    reset_high = (RESET_HIGH,) * 4
    dynamics = staticmethod(acrobot_step)
    observe = staticmethod(acrobot_observation)

    def _make_action_spec(self) -> TensorSpec:
        return Categorical(3, shape=(self.num_envs,), device=self.device)

    def initial_state(self) -> Tensor:
        # Gymnasium stores its reset state as float32; rounding keeps float64 envs on
        # exactly the distribution gymnasium draws from.
        return super().initial_state().float().to(self.state_dtype)
