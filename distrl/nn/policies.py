"""Actor-critics for PPO with one interface over discrete and continuous actions.

Both classes build their policy and value towers as :class:`distrl.nn.models.ActorCritic` does
(:func:`distrl.nn.models.actor_critic_towers`: separate MLPs for flat observations, one conv torso for
images) and expose the four calls an on-policy learner makes:

* ``act(obs [*B, *obs_shape]) -> (action, log_prob [*B])``: sample, in the rollout (no grad);
* ``value(obs [*B, *obs_shape]) -> [*B, 1]``: the critic (an ``nn.Module`` attribute);
* ``evaluate(obs, action) -> (log_prob [*B], entropy [*B], value [*B])``: the update's
  re-evaluation, in one pass (an image torso runs once for both heads);
* ``greedy(obs) -> action``: the evaluation policy (argmax, or the Gaussian's mean).

Actions are ``[*B]`` int64 indices (discrete) or ``[*B, A]`` float32 (continuous, unbounded:
the env adapter clips them to the action bounds, the log-probability is of the unclipped sample).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from distrl.config import NetConfig
from distrl.nn.encoders import as_shape
from distrl.nn.heads import gaussian_entropy, gaussian_log_prob
from distrl.nn.obs_norm import ObsNorm  # noqa: F401  (re-exported: its home before distrl.nn.obs_norm)
from distrl.nn.models import ActorCritic, actor_critic_towers, greedy_actions, sample_actions, shared_torso



class CategoricalActorCritic(ActorCritic):
    """Discrete actions: ``policy(obs)`` gives logits ``[*B, A]``; sampling is Gumbel-max."""

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return sample_actions(self.policy(obs))

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, value = self(obs)
        log_probs = torch.log_softmax(logits, dim=-1)  # [*B, A]
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return log_prob, entropy, value.squeeze(-1)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return greedy_actions(self.policy(obs))


class GaussianActorCritic(nn.Module):
    """Continuous actions: a diagonal Gaussian with a state-independent ``log_std [A]``.

    ``policy(obs)`` gives the mean ``[*B, A]``; the standard deviation is a learned parameter,
    not a network output, as in PPO's MuJoCo setup (Schulman et al., 2017): it cannot collapse
    on a single state and it makes the entropy independent of the observation.
    """

    def __init__(self, obs_shape: int | Sequence[int], action_dim: int, net: NetConfig = NetConfig(),
                 init_log_std: float = 0.0):
        super().__init__()
        self.obs_shape, self.action_dim = as_shape(obs_shape), action_dim
        # the small last policy layer starts the means near 0, so early actions come from the std alone
        self.policy, self.value = actor_critic_towers(self.obs_shape, action_dim, net)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def _log_prob(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return gaussian_log_prob(mean, self.log_std, action)

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.policy(obs)
        action = mean + torch.exp(self.log_std) * torch.randn_like(mean)
        return action, self._log_prob(mean, action)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        torso = shared_torso(self.value)
        if torso is None:
            mean, value = self.policy(obs), self.value(obs)
        else:
            z = torso(obs)  # once for both heads
            mean, value = self.policy[-1](z), self.value.head(z)
        log_prob = self._log_prob(mean, action)
        entropy = gaussian_entropy(self.log_std).expand_as(log_prob)
        return log_prob, entropy, value.squeeze(-1)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy(obs)


def make_actor_critic(obs_shape: int | Sequence[int], num_actions: int | None, action_dim: int, net: NetConfig,
                      init_log_std: float = 0.0, normalize_obs: bool = False) -> nn.Module:
    """A :class:`CategoricalActorCritic` when ``num_actions`` is set, else a :class:`GaussianActorCritic`.

    With ``normalize_obs`` both MLPs start with one shared :class:`ObsNorm` (``model.obs_norm``).
    Flat observations only: an image encoder scales uint8 pixels by 1/255 itself, and per-pixel
    running statistics would divide by the near-zero variance of pixels that are almost always
    0, so ``normalize_obs`` with images is a ``ValueError`` rather than silently ignored.
    """
    shape = as_shape(obs_shape)
    if normalize_obs and len(shape) != 1:
        raise ValueError(f"normalize_obs standardises flat observations; images {shape} are scaled by their "
                         "encoder: set algo.normalize_obs=false")
    if num_actions is not None:
        model = CategoricalActorCritic(shape, num_actions, net)
    else:
        model = GaussianActorCritic(shape, action_dim, net, init_log_std)
    if normalize_obs:
        model.obs_norm = ObsNorm(shape[0])
        model.policy = nn.Sequential(model.obs_norm, model.policy)
        model.value = nn.Sequential(model.obs_norm, model.value)
    return model
