"""n-step replay inserts from trajectories a batched inference server assembles.

An Ape-X actor joins each unroll ``[B, T]`` to the last ``n - 1`` steps of the one before, so
every step gets its full n-step window, and inserts the window's transitions with initial
priorities (``distrl/recipes/apex/actor.py``). Where the server acts for the envs (SEED's
:class:`~distrl.data.unrolls.GroupTrajectories` assembles their unrolls), the same
join belongs to the server's per-group state, which knows when a worker restarted:
:class:`NStepTrajectories` cuts windows ``[B, W]`` (``W = T + n - 1``, or ``T`` for the first of a
run) instead of unrolls, and :func:`nstep_insert` turns a window into the insert message an Ape-X
actor sends (:func:`distrl.data.transitions.pack_transitions`: each observation once).
"""

from __future__ import annotations

from typing import Callable

import torch
from tensordict import TensorDict

from distrl.algorithms.estimators import nstep_returns
from distrl.data import keys
from distrl.data.transitions import pack_transitions
from distrl.data.unrolls import GroupTrajectories


class NStepTrajectories(GroupTrajectories):
    """:class:`GroupTrajectories` whose chunks are n-step windows, with each env's exploration rate.

    Args (beyond :class:`GroupTrajectories`'): n_step: ``n``; epsilon: ``[B]`` the rate each env of
    the group explores with (:func:`distrl.roles.epsilon_greedy.env_ladder`).

    A chunk is ``{traj: [B, W], epsilon: [B]}`` of batch ``[B]``; its episode returns are those of the
    episodes that ended in its last ``T`` steps, in the order of ``traj[:, -T:]``'s ends (time, then
    env: :func:`ended_envs`). A run id change (the worker restarted) drops the carried steps.
    """

    def __init__(self, *args, n_step: int, epsilon: torch.Tensor, **kwargs):
        super().__init__(*args, **kwargs)
        if not 1 <= n_step <= self.T:
            raise ValueError(f"n_step ({n_step}) must be in [1, unroll_length ({self.T})]")
        self.n, self.epsilon = n_step, epsilon
        self.carry: TensorDict | None = None  #: the last n - 1 steps of the previous chunk, [B, n-1]

    def reset(self, run_id: int) -> None:
        super().reset(run_id)
        self.carry = None  # the new run's first step does not follow the old run's last

    def _cut(self) -> tuple[TensorDict, list[float]]:
        chunk, returns = super()._cut()
        traj = chunk[keys.TRAJ]
        window = traj if self.carry is None else torch.cat([self.carry, traj], dim=1)
        self.carry = traj[:, self.T - (self.n - 1) :].clone() if self.n > 1 else None
        return TensorDict({keys.TRAJ: window, keys.EPSILON: self.epsilon.clone()}, batch_size=[self.num_envs]), returns


def ended_envs(traj: TensorDict, steps: int) -> torch.Tensor:
    """``[E]`` the env index of each episode that ended in the last ``steps`` steps of ``traj [B, W]``,
    ordered by step, then env: the order a server's episode returns come in."""
    done = traj[keys.DONE][:, -steps:, 0]  # [B, steps]
    return done.t().nonzero()[:, 1]


def nstep_insert(
    window: TensorDict, q: Callable[[torch.Tensor], torch.Tensor], gamma: float, n: int, frames: bool = False
) -> TensorDict:
    """The Ape-X insert message of the n-step transitions of ``window [B, W]``.

    Args:
        window: steps with ``observation [B, W, *F]``, ``action [B, W]``, ``policy_version [B, W]`` and
            ``("next", observation/reward/terminated/truncated)``, observations chained within episodes.
        q: ``obs [M, *F] -> Q [M, A]``, the network the initial priorities are computed with.
        gamma, n: discount and steps per return (``n <= W``).
        frames: observations are frame stacks (``pack_transitions``' frame form).

    The ``T' = W - n + 1`` transitions per env get the priority ``|y - Q(s, a)|`` with
    ``y = G + gamma^m max_a Q(s', a)`` (Ape-X's, as the actors compute it), from one forward over
    their observations and bootstrap observations; the message carries the oldest policy version
    among their steps.
    """
    nxt = window[keys.NEXT]
    G, discount, last = nstep_returns(
        nxt[keys.STEP_REWARD][..., 0], nxt[keys.STEP_TERMINATED][..., 0], nxt[keys.STEP_TRUNCATED][..., 0], gamma, n
    )
    B, Tp = G.shape
    obs = window[keys.OBSERVATION][:, :Tp].flatten(0, 1)  # [B T', *F]
    bootstrap = nxt[keys.OBSERVATION][torch.arange(B)[:, None], last].flatten(0, 1)  # [B T', *F]
    values = q(torch.cat([obs, bootstrap]))
    q_taken = values[: B * Tp].gather(-1, window[keys.ACTION][:, :Tp].reshape(-1, 1)).squeeze(-1)
    y = G.reshape(-1) + discount.reshape(-1) * values[B * Tp :].max(-1).values
    version = int(window[keys.POLICY_VERSION][:, :Tp].min())
    return pack_transitions(window, G, discount, last, (y - q_taken).abs(), version, frames=frames)
