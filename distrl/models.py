"""Actor-critic and Q networks over any observation, and the fast action sampling every actor uses.

Each network starts with an encoder (:mod:`distrl.encoders`, chosen by ``net.encoder``):

* ``mlp`` (flat observations): separate policy and value MLPs, each the encoder's layers with a
  linear head appended (``policy.0/2/4``, ``value.0/2/4``: the state dict distrl always wrote);
* an image encoder: one conv torso shared by the policy and value heads, as IMPALA and
  sample-factory share it: the torso is computed once for both in ``forward``.

Sampling uses the Gumbel-max trick on raw logits instead of a
``torch.distributions.Categorical`` object: on CPU the object alone costs about 70 of the 95 us of
a batch-1 policy call (``python -m timeit`` of the forward and sample: 95 us, 33 us with Gumbel-max), and actors call the policy once per vector step.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

# re-exported: modules import them from here, and pickles of exported policies name distrl.models.Tanh
from distrl.activations import ACTIVATIONS, Tanh  # noqa: F401
from distrl.config import NetConfig
from distrl.encoders import MLPEncoder, as_shape, make_encoder, resolve_encoder


class TorsoHead(nn.Module):
    """``head(torso(obs))`` over a torso another module owns: the value head beside a policy
    ``nn.Sequential(torso, head)``.

    The torso is held outside ``_modules``, so the model's state dict lists it once (under
    ``policy.0``): weights travel to actors as the state dict, which would otherwise carry every
    torso tensor twice. So this module's own ``parameters()`` and ``state_dict()`` hold the head
    only; move and load the whole model, not this part alone.
    """

    def __init__(self, torso: nn.Module, head: nn.Module):
        super().__init__()
        object.__setattr__(self, "torso", torso)  # not registered: see above
        self.head = head

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(obs))


def actor_critic_towers(obs_shape: Sequence[int], outputs: int, net: NetConfig) -> tuple[nn.Module, nn.Module]:
    """``(policy, value)``: ``policy(obs [*B, *obs_shape]) -> [*B, outputs]``, ``value(obs) -> [*B, 1]``.

    The mlp encoder gives two separate MLPs; an image encoder one torso, registered inside
    ``policy = nn.Sequential(torso, Linear)`` (so the policy alone is a complete module, as actors
    and exported policies use it) and borrowed by ``value = TorsoHead(torso, Linear)``. The policy's
    last layer starts 100x smaller, which starts the policy near uniform and keeps early V-trace
    importance ratios close to 1 (as in most PPO/IMPALA implementations).
    """
    if resolve_encoder(obs_shape, net.encoder) == "mlp":
        policy, value = MLPEncoder(obs_shape, net, head=outputs), MLPEncoder(obs_shape, net, head=1)
    else:
        torso = make_encoder(obs_shape, net)
        policy = nn.Sequential(torso, nn.Linear(torso.out_features, outputs))
        value = TorsoHead(torso, nn.Linear(torso.out_features, 1))
    with torch.no_grad():
        policy[-1].weight.mul_(0.01)
        policy[-1].bias.zero_()
    return policy, value


def shared_torso(value: nn.Module) -> nn.Module | None:
    """The torso a value tower borrows from its policy (:class:`TorsoHead`), or None for an MLP."""
    return value.torso if isinstance(value, TorsoHead) else None


def tower_groups(policy: nn.Module, value: nn.Module) -> list[list[nn.Parameter]]:
    """What :func:`clip_towers` clips apart: ``[policy, value]`` for separate MLPs, ``[torso,
    policy head, value head]`` over a shared torso. The torso's gradient is the sum of both losses'
    whatever is done; clipped on its own it gets the global clip IMPALA and sample-factory give the
    whole network, while each head still takes its step whatever the other's gradient norm."""
    torso = shared_torso(value)
    if torso is None:
        return [list(policy.parameters()), list(value.parameters())]
    return [list(torso.parameters()), list(policy[-1].parameters()), list(value.head.parameters())]


class ActorCritic(nn.Module):
    """A policy and a value over one observation encoder (:func:`actor_critic_towers`).

    ``forward(obs [*B, *obs_shape]) -> (logits [*B, A], value [*B, 1])``; ``policy(obs)`` and
    ``value(obs)`` are the two towers as modules. ``obs_shape`` may be an int ``F`` (``(F,)``).
    """

    def __init__(self, obs_shape: int | Sequence[int], num_actions: int, net: NetConfig = NetConfig()):
        super().__init__()
        self.obs_shape, self.num_actions = as_shape(obs_shape), num_actions
        self.policy, self.value = actor_critic_towers(self.obs_shape, num_actions, net)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        torso = shared_torso(self.value)
        if torso is None:
            return self.policy(obs), self.value(obs)
        z = torso(obs)  # once for both heads
        return self.policy[-1](z), self.value.head(z)

    def tower_parameters(self) -> list[list[nn.Parameter]]:
        """The groups :func:`clip_towers` clips apart (:func:`tower_groups`): the policy tower's
        parameters, then the value tower's; over a conv torso: the torso's, the policy head's, the value head's."""
        return tower_groups(self.policy, self.value)


def clip_towers(towers: list[list[nn.Parameter]], max_norm: float) -> torch.Tensor:
    """Clip each tower's gradient to ``max_norm`` on its own; returns the global norm before clipping.

    Why apart: under one global clip the value gradient sets the norm (CartPole's returns reach
    1/(1-gamma) = 100, so its grad norm runs 20-100 against a clip of 1), and the policy's share of
    every step then shrinks and swells with the value loss: 10x smaller exactly when the policy
    fails and the value loss jumps (docs/impala.md, "Learning that holds").
    """
    # foreach: one kernel over a tower's tensors (CPU's default is a Python loop over them)
    norms = [torch.nn.utils.clip_grad_norm_(group, max_norm, foreach=True) for group in towers]
    return torch.linalg.vector_norm(torch.stack(norms))


class DuelingHead(nn.Module):
    """``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')`` from features ``[*B, D]`` (Wang et al., 2016).

    Ape-X's network. The value of every action moves through ``V`` when the scale of returns
    moves (CartPole's Q climbs from ~50 to ~100 once the policy first survives to the time limit),
    and the greedy action reads only ``A``, which that shift leaves alone."""

    def __init__(self, features: int, num_actions: int):
        super().__init__()
        self.value = nn.Linear(features, 1)
        self.advantage = nn.Linear(features, num_actions)  # registered last: its rows are the actions

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        a = self.advantage(z)
        return self.value(z) + a - a.mean(-1, keepdim=True)


class QNetwork(nn.Module):
    """Action values over one encoder: ``forward(obs [*B, *obs_shape]) -> Q [*B, A]`` (Ape-X's actors
    and learner). ``q`` is the mlp encoder with a linear head appended (``q.0/2/4``, as ever), or
    ``nn.Sequential(image encoder, Linear)`` as in the papers' DQNs; with ``dueling``,
    ``nn.Sequential(encoder, DuelingHead)``."""

    def __init__(self, obs_shape: int | Sequence[int], num_actions: int, net: NetConfig = NetConfig(),
                 dueling: bool = False):
        super().__init__()
        self.obs_shape, self.num_actions = as_shape(obs_shape), num_actions
        mlp = resolve_encoder(self.obs_shape, net.encoder) == "mlp"
        if mlp and not dueling:
            self.q = MLPEncoder(self.obs_shape, net, head=num_actions)
        else:
            torso = MLPEncoder(self.obs_shape, net) if mlp else make_encoder(self.obs_shape, net)
            head = DuelingHead if dueling else nn.Linear
            self.q = nn.Sequential(torso, head(torso.out_features, num_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs)


def sample_actions(logits: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample from ``softmax(logits)`` by Gumbel-max.

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


def resolve_device(name: str) -> torch.device:
    """``auto`` means CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
