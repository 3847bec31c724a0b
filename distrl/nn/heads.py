"""How a policy's output becomes actions: one object per action space, the same in every recipe.

A policy network ends in a tensor ``out [*B, width]``; its head says what that tensor means:

* :class:`CategoricalHead` (discrete ``A`` actions): ``out`` is the logits ``[*B, A]``; actions
  are int64 indices ``[*B]``, sampled by Gumbel-max (:func:`distrl.nn.models.sample_actions`). Under
  an env's action mask the logits arrive with illegal actions at the lowest float
  (:mod:`distrl.nn.action_mask`), so sampling, argmax, log-probabilities and entropy here are those
  of the distribution over legal actions with no change to this head.
* :class:`GaussianHead` (a ``Box`` of ``A`` dims): ``out`` is ``cat(mean, log_std) [*B, 2A]``
  (:class:`GaussianParams` writes it); actions are float32 ``[*B, A]``.

Bounds, one treatment everywhere: the sampled action is clipped to the box **at the env**
(:func:`distrl.envs.gym.make_vector_env` wraps a ``Box`` env in gymnasium's ``ClipAction``) and the
learner's log-probability is that of the unclipped sample, which is what the behaviour policy drew.
This is the PPO/IMPALA MuJoCo habit (Schulman et al. 2017; SEED RL and sample-factory do the
same): the log-probability stays exact and cheap, and the mean can sit at a bound; tanh-squashing
is SAC's alone (:mod:`distrl.nn.sac`). Every actor-critic recipe's Gaussian is this one (``vecenv``'s
included), its log-std clamped to [LOG_STD_MIN, LOG_STD_MAX] by :class:`GaussianParams`.

Why heads carry no parameters: the log-std lives in the policy tower (:class:`GaussianParams`),
so everything that ships a policy (a state dict, a flat parameter vector, a checkpoint, an
exported policy) ships it without knowing what kind of head reads it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
#: the state-dependent log-std's range (a network output can run away; the learned vector cannot be
#: pushed past it either: its gradient is cut at the bounds as a clamp's is)
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def sample_actions(logits: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample from ``softmax(logits)`` by Gumbel-max.

    Why not ``torch.distributions.Categorical``: on CPU the object alone costs about 70 of the 95 us
    of a batch-1 policy call (``python -m timeit`` of the forward and sample: 95 us, 33 us with
    Gumbel-max), and actors call the policy once per vector step.

    Args:
        logits: ``[*B, A]`` unnormalised log-probabilities.
    Returns:
        ``(action [*B] int64, log_prob [*B] float)``.
    """
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(uniform.clamp_(1e-10, 1.0)))
    action = torch.argmax(logits + gumbel, dim=-1)
    log_prob = torch.log_softmax(logits, dim=-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
    return action, log_prob


def greedy_actions(logits: torch.Tensor) -> torch.Tensor:
    """``argmax`` actions ``[*B]`` from logits ``[*B, A]`` (evaluation)."""
    return torch.argmax(logits, dim=-1)


def gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """``log N(action; mean, exp(log_std)^2)`` of a diagonal Gaussian, summed over the last dim: ``[*B, A] -> [*B]``."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian, ``sum_a (1/2 + log sqrt(2 pi) + log_std_a)``: ``[*B, A] -> [*B]``."""
    return (0.5 + _LOG_SQRT_2PI + log_std).sum(-1)


class CategoricalHead:
    """Discrete actions: ``out`` is logits ``[*B, A]``, actions int64 ``[*B]``."""

    continuous = False

    def __init__(self, num_actions: int):
        self.num_actions = self.width = num_actions
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = torch.int64

    def sample(self, out: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return sample_actions(out, generator)

    def log_prob(self, out: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(out, dim=-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def log_prob_entropy(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log_prob [*B], entropy [*B])`` with one softmax."""
        log_probs = F.log_softmax(out, dim=-1)
        return log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1), -(log_probs.exp() * log_probs).sum(-1)

    def entropy(self, out: torch.Tensor) -> torch.Tensor:
        log_probs = F.log_softmax(out, dim=-1)
        return -(log_probs.exp() * log_probs).sum(-1)

    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        return greedy_actions(out)

    def spread(self, out: torch.Tensor) -> torch.Tensor:
        """Mean gap between the largest and smallest logit (a policy going deterministic shows it growing)."""
        return (out.max(-1).values - out.min(-1).values).mean()


class GaussianHead:
    """Continuous actions: ``out`` is ``cat(mean, log_std) [*B, 2A]``, actions float32 ``[*B, A]``
    (unbounded: the env clips them, see the module docstring)."""

    continuous = True

    def __init__(self, action_dim: int):
        self.action_dim, self.width = action_dim, 2 * action_dim
        self.num_actions = None
        self.action_shape = (action_dim,)
        self.action_dtype = torch.float32

    def split(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean [*B, A], log_std [*B, A])``."""
        return out[..., : self.action_dim], out[..., self.action_dim :]

    def sample(self, out: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.split(out)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        action = mean + torch.exp(log_std) * noise
        # log N(a; mean, std) with z = noise exactly: no round trip through (a - mean) / std
        return action, (-0.5 * noise.square() - log_std - _LOG_SQRT_2PI).sum(-1)

    def log_prob(self, out: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.split(out)
        return gaussian_log_prob(mean, log_std, action)

    def log_prob_entropy(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.split(out)
        return gaussian_log_prob(mean, log_std, action), gaussian_entropy(log_std)

    def entropy(self, out: torch.Tensor) -> torch.Tensor:
        return gaussian_entropy(self.split(out)[1])

    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        return self.split(out)[0]

    def spread(self, out: torch.Tensor) -> torch.Tensor:
        """Mean standard deviation (exploration shrinking shows it falling)."""
        return self.split(out)[1].exp().mean()


def make_head(num_actions: int | None, action_dim: int):
    """A :class:`CategoricalHead` when ``num_actions`` is set (discrete), else a :class:`GaussianHead`."""
    return CategoricalHead(num_actions) if num_actions is not None else GaussianHead(action_dim)


class GaussianParams(nn.Module):
    """The policy tower's last module for a Gaussian head: ``x -> cat(mean, log_std) [*B, 2A]``.

    ``state_dependent=False`` (``net.log_std=param``, PPO's MuJoCo setup): ``x`` is the mean
    ``[*B, A]`` and ``log_std [A]`` a learned parameter, so the entropy does not depend on the state
    and the std cannot collapse on one state. ``True`` (``net.log_std=state``): ``x [*B, 2A]`` holds
    the mean and a raw log-std, offset by ``init_log_std`` and clamped to [LOG_STD_MIN, LOG_STD_MAX].
    """

    def __init__(self, action_dim: int, state_dependent: bool = False, init_log_std: float = 0.0):
        super().__init__()
        self.action_dim, self.state_dependent, self.init_log_std = action_dim, state_dependent, float(init_log_std)
        if not state_dependent:
            self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.state_dependent:
            mean, raw = x[..., : self.action_dim], x[..., self.action_dim :]
            return torch.cat([mean, (raw + self.init_log_std).clamp(LOG_STD_MIN, LOG_STD_MAX)], dim=-1)
        return torch.cat([x, self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).expand_as(x)], dim=-1)


class LocScale(nn.Module):
    """A Gaussian head's output ``cat(mean, log_std) [*B, 2A]`` as TorchRL's ``(loc [*B, A], scale [*B, A])``:
    what an exported policy (:func:`distrl.nn.trained_policy.load_policy`) appends to the policy tower
    so that TorchRL's ``IndependentNormal`` reads the distribution distrl trained."""

    def __init__(self, action_dim: int):
        super().__init__()
        self.head = GaussianHead(action_dim)  # no parameters: a plain attribute, not a submodule

    def forward(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.head.split(out)
        return mean, log_std.exp()
