"""A recurrent actor-critic (encoders -> LSTM cells -> policy and value heads).

Used by ``seed`` with ``algo.core=lstm``: the inference server keeps every env's core state
and steps it once per observation (:meth:`RecurrentActorCritic.step`); the learner replays a
chunk from the core state stored at its start (:meth:`RecurrentActorCritic.unroll`).
:class:`UnrolledCore` lets the unchanged IMPALA loss train it.

A core state is one tensor ``[*B, 4, H]`` (``h`` and ``c`` of both towers stacked) so that the server gathers,
resets and scatters it with plain indexing, and a chunk carries it as one entry.

Discrete or continuous actions, as :class:`distrl.nn.models.ActorCritic`: the policy's output ``out``
is read by ``head`` (:mod:`distrl.nn.heads`): logits ``[*B, A]``, or a Gaussian's ``cat(mean, log_std)
[*B, 2A]`` written by a :class:`distrl.nn.heads.GaussianParams` after the policy head's linear layer.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from distrl.config import NetConfig
from distrl.data.keys import CORE_STATE  # noqa: F401  (re-exported: the key a chunk's state travels under)
from distrl.nn.encoders import MLPEncoder, as_shape, make_encoder, resolve_encoder
from distrl.nn.heads import GaussianParams, make_head
from distrl.nn.obs_norm import ObsNorm as RunningNorm


class _Tower(nn.Module):
    """(Encoder ->) LSTM cell: ``(x [N, F], h, c [N, H]) -> h, c``. Without an encoder (over a
    shared image torso) ``x`` is the torso's features."""

    def __init__(self, encoder: nn.Module | None, in_features: int, core_size: int):
        super().__init__()
        if encoder is not None:
            self.encoder = encoder
        self.core = nn.LSTMCell(in_features, core_size)


class RecurrentActorCritic(nn.Module):
    """Two towers, each an ``LSTMCell`` of ``core_size`` over an encoding of the observation, with
    a linear policy head on one and a linear value head on the other.

    ``num_actions`` set: the policy head gives logits ``[*B, A]``; ``num_actions=None`` and
    ``action_dim=A``: it gives a Gaussian's mean and ``gaussian`` (a :class:`GaussianParams`, the
    log-std as ``net.log_std`` says) appends the log-std, ``[*B, 2A]``. ``head`` reads either.

    Flat observations are standardised (:class:`RunningNorm`, ``obs_norm``) and each tower has its
    own mlp encoder. Images go through one shared image encoder (``torso``: IMPALA's deep network
    has its LSTM after it) whose features feed both cores; they are not standardised
    (``obs_norm`` is None): the encoder scales uint8 by 1/255, and per-pixel statistics would be
    noise on pixels that are almost always 0.

    Separate towers, as :class:`distrl.nn.models.ActorCritic` has separate MLPs: with one shared
    core, the value loss (returns up to ~1/(1-gamma)) dominated the clipped gradient and the
    policy did not learn even the memoryless toy env (measured; see docs/seed.md). A core state
    is ``[*B, 4, H]``: ``(h, c)`` of the policy tower, then of the value tower.
    """

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        num_actions: int | None,
        net: NetConfig = NetConfig(),
        core_size: int = 64,
        action_dim: int = 1,
    ):
        super().__init__()
        self.obs_shape, self.num_actions, self.core_size = as_shape(obs_shape), num_actions, core_size
        self.head = make_head(num_actions, action_dim)
        if resolve_encoder(self.obs_shape, net.encoder) == "mlp":
            self.obs_norm, self.torso = RunningNorm(self.obs_shape[0]), None
            self.pi, self.v = (_Tower(MLPEncoder(self.obs_shape, net), net.hidden[-1], core_size) for _ in range(2))
        else:
            self.obs_norm, self.torso = None, make_encoder(self.obs_shape, net)
            self.pi, self.v = (_Tower(None, self.torso.out_features, core_size) for _ in range(2))
        state_std = self.head.continuous and net.log_std == "state"
        self.policy_head = nn.Linear(
            core_size, self.head.width if not self.head.continuous or state_std else action_dim
        )
        self.value_head = nn.Linear(core_size, 1)
        with torch.no_grad():  # near-uniform start, as in ActorCritic (ratios near 1 early on)
            self.policy_head.weight.mul_(0.01)
            self.policy_head.bias.zero_()
        #: the Gaussian's log-std (None for discrete actions: the state dict stays what it was)
        self.gaussian = GaussianParams(action_dim, state_std, net.init_log_std) if self.head.continuous else None

    @classmethod
    def for_env(cls, info, net: NetConfig = NetConfig(), core_size: int = 64) -> "RecurrentActorCritic":
        """The network for an env's :class:`distrl.envs.info.EnvInfo` (its shape and action space)."""
        return cls(info.shape, info.num_actions, net, core_size, info.action_dim)

    def _policy_out(self, h: torch.Tensor) -> torch.Tensor:
        """The policy core's ``h [*B, H]`` -> ``out [*B, head.width]`` (logits, or mean and log-std)."""
        out = self.policy_head(h)
        return out if self.gaussian is None else self.gaussian(out)

    def tower_parameters(self) -> list[list[nn.Parameter]]:
        """The policy tower's parameters (with its head), then the value tower's; over an image
        torso, the torso's first, as a group of its own (as :func:`distrl.nn.models.tower_groups`)."""
        policy_head = [
            *self.policy_head.parameters(),
            *(self.gaussian.parameters() if self.gaussian is not None else ()),
        ]
        towers = [[*self.pi.parameters(), *policy_head], [*self.v.parameters(), *self.value_head.parameters()]]
        return towers if self.torso is None else [list(self.torso.parameters()), *towers]

    def _features(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [*B, *obs_shape]`` -> the policy core's and the value core's inputs ``[*B, F']``."""
        if self.torso is None:
            obs = self.obs_norm(obs)
            return self.pi.encoder(obs), self.v.encoder(obs)
        z = self.torso(obs)
        return z, z

    def initial_state(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Zero core state ``[n, 4, H]``, the state at every episode start."""
        return torch.zeros(n, 4, self.core_size, device=device)

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step for ``N`` envs.

        Args:
            obs: ``[N, *obs_shape]``; state: ``[N, 4, H]``, the state before this observation.
        Returns:
            ``(out [N, head.width], value [N, 1], state [N, 4, H])``: the policy's output (logits
            ``[N, A]`` or a Gaussian's ``[N, 2A]``), and the state after this step.
        """
        xp, xv = self._features(obs)
        hp, cp = self.pi.core(xp, (state[:, 0], state[:, 1]))
        hv, cv = self.v.core(xv, (state[:, 2], state[:, 3]))
        return self._policy_out(hp), self.value_head(hv), torch.stack((hp, cp, hv, cv), dim=1)

    def unroll(
        self, obs: torch.Tensor, state0: torch.Tensor, reset: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Replay ``T`` steps from ``state0``, zeroing the state where an episode starts.

        Args:
            obs: ``[B, T, *obs_shape]``; state0: ``[B, 4, H]``; reset: ``[B, T]`` bool, true where the
                state must be zeroed before step ``t`` (the step starts a new episode).
        Returns:
            ``(out [B, T, head.width], value [B, T, 1], states [B, T, 4, H])``, the state after each step.
        """
        xp, xv = self._features(obs)  # feed-forward: one call for all T steps
        keep = (~reset).unsqueeze(-1).to(xp.dtype)  # [B, T, 1]
        state, states = state0, []
        for t in range(xp.shape[1]):
            s = state * keep[:, t].unsqueeze(-1)
            hp, cp = self.pi.core(xp[:, t], (s[:, 0], s[:, 1]))
            hv, cv = self.v.core(xv[:, t], (s[:, 2], s[:, 3]))
            state = torch.stack((hp, cp, hv, cv), dim=1)
            states.append(state)
        states = torch.stack(states, dim=1)  # [B, T, 4, H]
        return self._policy_out(states[:, :, 0]), self.value_head(states[:, :, 2]), states


class UnrolledCore:
    """A recurrent model seen through ``impala_loss``'s feed-forward interface, for one batch.

    ``impala_loss`` calls ``model(obs)`` then ``model.value(next_obs)``. Here the first call
    unrolls the core over the chunk and keeps the state after each step; the second takes one
    more step from each of those states on ``next_obs``, which gives ``V(x_{t+1})`` in the same
    episode's memory (the true final observation of a truncated episode included). So the
    recurrent learner trains with the very loss ``impala`` uses, not a copy of it.

    Args:
        state0: ``[B, 4, H]`` the core state before step 0 of each chunk.
        done: ``[B, T]`` episode ends; step ``t`` starts a new episode when step ``t - 1`` ended one.
    """

    def __init__(self, model: RecurrentActorCritic, state0: torch.Tensor, done: torch.Tensor):
        self.model, self.state0 = model, state0
        self.reset = torch.zeros_like(done)
        self.reset[:, 1:] = done[:, :-1]  # step 0's reset was applied by the server already
        self._states: torch.Tensor | None = None

    @property
    def head(self):
        """The model's head: ``impala_loss`` reads the policy's output through it (Gaussian or categorical)."""
        return self.model.head

    def __call__(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, value, self._states = self.model.unroll(obs, self.state0, self.reset)
        return out, value

    def value(self, next_obs: torch.Tensor) -> torch.Tensor:
        """``V`` of ``next_obs [B, T, *obs_shape]`` -> ``[B, T, 1]``; call after ``__call__`` on the same batch."""
        if self._states is None:
            raise RuntimeError("UnrolledCore.value needs the unroll of __call__ first")
        B, T = next_obs.shape[:2]
        _, value, _ = self.model.step(next_obs.flatten(0, 1), self._states.reshape(B * T, 4, -1))
        return value.view(B, T, 1)
