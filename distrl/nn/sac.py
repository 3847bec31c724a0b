"""SAC's networks (Haarnoja et al., 2018): a tanh-squashed Gaussian policy and twin Q-functions over
one observation normaliser, with the entropy temperature beside them.

The policy's MLP writes ``cat(mean, log_std) [*B, 2A]`` (log-std clamped to [LOG_STD_MIN, LOG_STD_MAX],
CleanRL's range); an action is ``a = bias + scale tanh(u)``, ``u ~ N(mean, std)``, with ``scale`` and
``bias`` the half-width and centre of the env's action box. Its log-probability carries the change
of variables (Haarnoja et al. 2018, appendix C), per dimension:

    log pi(a|s) = log N(u; mean, std) - log(scale (1 - tanh(u)^2))

with ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``, which stays finite where ``tanh(u)``
rounds to 1 (the form TorchRL's ``SafeTanhTransform`` and SB3 avoid needing an epsilon for).

Why not distrl's :class:`~distrl.nn.heads.GaussianHead`: that head leaves actions unbounded and the env
clips them (exact log-probabilities for PPO's ratio); SAC's entropy term needs the density of the
action the env actually takes, so the squashing is part of the policy.

The normaliser (:class:`~distrl.nn.obs_norm.ObsNorm`, ``net.obs_norm``) is applied once in front of
both: the learner's target critic is a copy of :attr:`SACNetwork.qvalue` alone, which then reads
the same normalised features as the online one (a Polyak average of running statistics would not
be statistics of anything). ``log_alpha`` lives in the model, so it is checkpointed, optimised by the
same Adam and shipped to actors with the weights (their initial priorities read it).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from distrl.config import NetConfig
from distrl.nn.encoders import MLPEncoder, as_shape
from distrl.nn.heads import LOG_STD_MAX, LOG_STD_MIN
from distrl.nn.obs_norm import ObsNorm

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)


def squashed_log_prob(mean: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``log pi(a|s)`` of ``a = bias + scale tanh(u)`` for pre-squash ``u [*B, A]`` drawn from
    ``N(mean, exp(log_std))`` (all ``[*B, A]``, ``scale [A]``): ``[*B]``, see the module docstring."""
    z = (u - mean) * torch.exp(-log_std)
    gaussian = -0.5 * z.square() - log_std - _LOG_SQRT_2PI
    log_det = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u)) + torch.log(scale)
    return (gaussian - log_det).sum(-1)


def squashed_sample(
    mean: torch.Tensor,
    log_std: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised draw ``(action [*B, A], log_prob [*B])``: gradients flow to ``mean`` and
    ``log_std`` through the noise (the actor loss needs them)."""
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    u = mean + torch.exp(log_std) * noise
    return bias + scale * torch.tanh(u), squashed_log_prob(mean, log_std, u, scale)


class TwinQ(nn.Module):
    """Two independent Q-functions ``(q1, q2)``: ``forward(z [*B, F], a [*B, A]) -> [2, *B]``, each an
    MLP over ``cat(z, a)`` (SAC's clipped double Q, Fujimoto et al. 2018)."""

    def __init__(self, obs_dim: int, action_dim: int, net: NetConfig):
        super().__init__()
        self.q1 = MLPEncoder((obs_dim + action_dim,), net, head=1)
        self.q2 = MLPEncoder((obs_dim + action_dim,), net, head=1)

    def forward(self, z: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([z, action], dim=-1)
        return torch.stack([self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)])


class SACNetwork(nn.Module):
    """Policy, twin critic, normaliser and temperature of one SAC agent (module docstring).

    Args:
        obs_shape: ``(F,)`` (flat observations only: MuJoCo's).
        action_dim: ``A``.
        low, high: ``[A]`` the action box; kept as the buffers ``action_scale`` and ``action_bias``,
            so a checkpoint rebuilds the policy without its env.
        net: widths and activation of every MLP; ``obs_norm`` as the other recipes read it.
        init_temperature: ``alpha`` at the start (SB3's and CleanRL's 1).
        critic_layer_norm: a ``LayerNorm`` after each hidden ``Linear`` of the critics only (as
            ``net.layer_norm`` puts one in every tower): DroQ's and RLPD's critics, whose features
            keep their scale while the TD targets move.
    """

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        action_dim: int,
        low: torch.Tensor,
        high: torch.Tensor,
        net: NetConfig = NetConfig(),
        init_temperature: float = 1.0,
        critic_layer_norm: bool = False,
    ):
        super().__init__()
        self.obs_shape, self.action_dim = as_shape(obs_shape), action_dim
        if len(self.obs_shape) != 1:
            raise ValueError(f"SAC's networks take flat observations [F], got {self.obs_shape}")
        F_ = self.obs_shape[0]
        # SAC's actions are continuous by definition: obs_norm=auto is on, as for every MuJoCo policy
        self.obs_norm = ObsNorm(F_) if net.obs_norm in ("auto", "on") else None
        self.actor = MLPEncoder(self.obs_shape, net, head=2 * action_dim)
        self.qvalue = TwinQ(F_, action_dim, replace(net, layer_norm=True) if critic_layer_norm else net)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_temperature)))
        low, high = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("action_scale", ((high - low) / 2).reshape(action_dim))
        self.register_buffer("action_bias", ((high + low) / 2).reshape(action_dim))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """``z [*B, F]``: float observations, normalised when the model has a normaliser."""
        obs = obs.float()
        return self.obs_norm(obs) if self.obs_norm is not None else obs

    def dist_params(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean [*B, A], log_std [*B, A])`` of the pre-squash Gaussian at features ``z``."""
        mean, log_std = self.actor(z).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, z: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action [*B, A], log_prob [*B])`` reparameterised, at features ``z``."""
        return squashed_sample(*self.dist_params(z), self.action_scale, self.action_bias, generator)

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Sampled actions ``[*B, A]`` within the box (what an actor plays)."""
        return self.sample(self.features(obs), generator)[0]

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``bias + scale tanh(mean) [*B, A]`` (evaluation, load_policy)."""
        mean, _ = self.dist_params(self.features(obs))
        return self.action_bias + self.action_scale * torch.tanh(mean)

    forward = greedy

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature ``exp(log_alpha)``, detached: the losses other than its own treat it as a constant."""
        return self.log_alpha.detach().exp()

    def tower_parameters(self) -> list[list[nn.Parameter]]:
        """What the learner clips apart: the policy's, the critics', the temperature."""
        return [list(self.actor.parameters()), list(self.qvalue.parameters()), [self.log_alpha]]


class ActionHead:
    """The head :func:`distrl.envs.gym.evaluate` reads :meth:`SACNetwork.greedy` through: its output
    is already the action."""

    continuous = True

    @staticmethod
    def greedy(out: torch.Tensor) -> torch.Tensor:
        return out


class LocScale(nn.Module):
    """``obs [*B, F] -> (loc [*B, A], scale [*B, A])``, the pre-squash Gaussian as TorchRL's ``TanhNormal``
    reads it (with ``low``/``high`` the box): what :func:`distrl.nn.trained_policy.load_policy` wraps, so
    its deterministic action is :meth:`SACNetwork.greedy`'s."""

    def __init__(self, model: SACNetwork):
        super().__init__()
        self.model = model

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.model.dist_params(self.model.features(obs))
        return mean, log_std.exp()


def sac_from_state(state: dict, net: NetConfig) -> SACNetwork:
    """A :class:`SACNetwork` with a checkpoint's weights ``state``: the observation size from the policy's
    first layer, ``A`` from its last, the box from ``action_scale`` and ``action_bias``, normalisation as
    the checkpoint holds it, a critic's ``LayerNorm`` (its layer 1) where the checkpoint has one; widths and
    activation from the run's ``net``."""
    weights = [v for k, v in state.items() if k.startswith("actor.") and v.dim() == 2]
    scale, bias = state["action_scale"], state["action_bias"]
    obs_norm = "on" if any(k.startswith("obs_norm.") for k in state) else "off"
    net = NetConfig(**{**net.__dict__, "obs_norm": obs_norm})
    critic_ln = "qvalue.q1.1.weight" in state
    model = SACNetwork(
        (weights[0].shape[1],), weights[-1].shape[0] // 2, bias - scale, bias + scale, net, critic_layer_norm=critic_ln
    )
    model.load_state_dict(state)
    return model
