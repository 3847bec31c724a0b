"""Epsilon-greedy acting on a Q-network where actions are chosen centrally (a batched inference
server, SEED-style): every env keeps its own rung of Ape-X's epsilon ladder, though no actor holds
a network.

Ape-X gives actor ``i`` of ``N`` the rate ``eps^(1 + alpha i / (N - 1))``
(:func:`distrl.algorithms.apex.epsilon_ladder`). A server that acts for every env can spread the
ladder over the envs themselves: :func:`env_ladder` hands the ``N = G B`` envs of ``G`` groups of
``B`` the ``N`` rungs, interleaved so that every group (every request) spans the whole ladder.
:class:`EpsilonGreedyHead` is the head (:mod:`distrl.nn.heads`) such a server samples with; it reads
the rate of each row of the batch from :attr:`EpsilonGreedyHead.epsilon`, which the server sets
before each forward. :class:`QPolicy` shows a Q-network to a server as the policy it acts with.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch
from torch import nn

from distrl.algorithms.apex import epsilon_ladder
from distrl.nn.action_mask import legal_from_output, random_legal


def env_ladder(
    groups: Sequence[Hashable], envs_per_group: int, eps: float, alpha: float
) -> dict[Hashable, torch.Tensor]:
    """``{group: epsilon [B]}``: env ``b`` of the ``g``-th of ``G`` groups gets rung ``b G + g`` of the
    ladder over ``G B`` envs (rung 0 explores most), so each group holds every ``G``-th rung."""
    rungs = torch.tensor(epsilon_ladder(len(groups) * envs_per_group, eps, alpha), dtype=torch.float32)
    G = len(groups)
    return {key: rungs[torch.arange(envs_per_group) * G + g] for g, key in enumerate(groups)}


class EpsilonGreedyHead:
    """Discrete actions from Q-values ``out [N, A]``: the greedy action, or with probability
    ``epsilon[n]`` one drawn uniformly (which may be the greedy one too).

    ``epsilon`` ``[N]`` (float32, on the Q-values' device) is set by the caller for each batch; a
    float broadcasts. :meth:`sample` returns the log-probability of the taken action under this
    behaviour policy, ``log(1 - eps + eps / A)`` for the greedy action and ``log(eps / A)`` for
    another, so a trajectory of it carries what an off-policy correction would need.

    With ``masked`` (Q-values of a masked network, :mod:`distrl.nn.action_mask`, illegal actions at the
    lowest float) the random draw is among the ``L`` legal actions of each row and ``A`` above is ``L``.
    """

    continuous = False

    def __init__(self, num_actions: int, epsilon: float | torch.Tensor = 0.0, masked: bool = False):
        self.num_actions = self.width = num_actions
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = torch.int64
        self.epsilon, self.masked = epsilon, masked

    def sample(self, out: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action [N] int64, log_prob [N])`` for Q-values ``out [N, A]``."""
        N, A = out.shape
        eps = torch.as_tensor(self.epsilon, dtype=out.dtype, device=out.device).expand(N)
        greedy = out.argmax(-1)
        explore = torch.rand(N, generator=generator, device=out.device) < eps
        if self.masked:
            legal = legal_from_output(out)
            uniform, A = random_legal(legal, generator), legal.sum(-1).to(out.dtype)
        else:
            uniform = torch.randint(A, (N,), generator=generator, device=out.device)
        action = torch.where(explore, uniform, greedy)
        prob = torch.where(action == greedy, 1 - eps + eps / A, eps / A)
        return action, torch.log(prob)

    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        """``argmax`` actions ``[N]`` (evaluation)."""
        return out.argmax(-1)


class QPolicy(nn.Module):
    """A Q-network ``obs [N, *F] -> Q [N, A]`` as the policy a batched inference server acts with:
    ``policy(obs)`` is the Q-values, ``head`` turns them into actions. It holds the network itself,
    not a copy: the server acts with the parameters the learner trains."""

    def __init__(self, q: nn.Module, head: EpsilonGreedyHead):
        super().__init__()
        self.q, self.head = q, head

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs)

    forward = policy
