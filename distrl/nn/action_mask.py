"""Action masks inside the network: illegal actions get the lowest float, so nothing picks them.

An action-masked env's observation ends with its mask, ``A`` 0/1 entries
(:mod:`distrl.envs.action_mask`). :class:`MaskedOutput` wraps a policy or Q tower ``obs -> out [*B, A]``
and sets the entries of illegal actions to :func:`masked_value` (``torch.finfo(dtype).min``), so
every consumer of the tower is masked without knowing it:

* a categorical head's Gumbel-max sample and its greedy argmax never pick an illegal action, and the
  log-probabilities and entropy every learner computes (``log_softmax`` over the masked logits) are
  those of the distribution over legal actions: ``exp(min)`` is exactly 0, and ``0 * min`` is 0, not
  the NaN that ``-inf`` would give (``0 * -inf``);
* a Q-network's argmax and max (Ape-X's acting, its double-DQN target and its initial priorities)
  run over legal actions only; the target network, a copy, masks the same way;
* everything that ships the tower (actors, inference servers, checkpoints, ``load_policy``) ships
  the mask with it.

The finite lowest value, rather than ``-inf``, also keeps a masked output's own mask readable
(:func:`legal_from_output`): an epsilon-greedy explorer that sees only Q-values draws among the legal
actions. A row whose mask is all 0 (a finished board game) counts every action as legal: no output
row is ever all masked, so no max, softmax or target is undefined.
"""

from __future__ import annotations

import torch
from torch import nn


def masked_value(dtype: torch.dtype) -> float:
    """The value of an illegal action's logit or Q-value: the lowest finite ``dtype``."""
    return torch.finfo(dtype).min


def legal_actions(obs: torch.Tensor, num_actions: int) -> torch.Tensor:
    """``legal [*B, A]`` bool from a masked env's observation ``obs [*B, F + A]`` (its last ``A``
    entries); a row with no legal action counts all as legal."""
    legal = obs[..., -num_actions:] > 0.5
    return legal | ~legal.any(-1, keepdim=True)


def mask_output(out: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """``out [*B, A]`` with illegal entries (``legal [*B, A]`` False) at :func:`masked_value`."""
    return out.masked_fill(~legal, masked_value(out.dtype))


def legal_from_output(out: torch.Tensor) -> torch.Tensor:
    """``legal [*B, A]``: the entries of a masked output ``out [*B, A]`` that are not :func:`masked_value`."""
    return out > masked_value(out.dtype)


def random_legal(legal: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One action ``[*B]`` int64 drawn uniformly among the legal ones of each row of ``legal [*B, A]``
    (the argmax of independent uniforms over the legal entries)."""
    u = torch.rand(legal.shape, generator=generator, device=legal.device)
    return u.masked_fill(~legal, -1.0).argmax(-1)


class MaskedOutput(nn.Module):
    """``tower(obs)`` with illegal actions at :func:`masked_value`: ``obs [*B, F + A] -> out [*B, A]``.

    ``num_masked`` (a buffer, ``A``) marks a masked network in its state dict, so a checkpoint
    rebuilds masked (:func:`distrl.nn.trained_policy.load_policy`)."""

    def __init__(self, tower: nn.Module, num_actions: int):
        super().__init__()
        self.tower, self.num_actions = tower, num_actions
        self.register_buffer("num_masked", torch.tensor(num_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return mask_output(self.tower(obs), legal_actions(obs, self.num_actions))


def is_masked(state: dict, prefix: str = "") -> bool:
    """Whether a state dict (of a module whose keys start with ``prefix``) holds a :class:`MaskedOutput`."""
    return any(k.startswith(prefix) and k.endswith("num_masked") for k in state)


class MaskBeside(nn.Module):
    """A masked network read the TorchRL way: ``(observation [*B, *F], action_mask [*B, A]) -> out``,
    the two concatenated as distrl's env wrapper does (the observation flattened, the mask as 0/1)
    before ``net`` (a :class:`MaskedOutput` or a network that holds one). What
    :func:`distrl.nn.trained_policy.load_policy` reads from a TensorDict's ``observation`` and
    ``action_mask``."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        flat = obs.flatten(action_mask.dim() - 1) if obs.dim() >= action_mask.dim() else obs
        return self.net(torch.cat([flat.to(torch.float32), action_mask.to(torch.float32)], dim=-1))
