"""Env stepping shared by every role that acts with a local policy (IMPALA's actor, A3C's
worker): a gymnasium vector env, its running episode statistics, and ``[B, T]`` unrolls.

One piece of code, so that a fix to episode accounting or truncation handling reaches every
recipe that steps envs itself (design rule 7). A failed env is recreated on a moved seed by the
caller's :meth:`VectorRollout.recover` after :meth:`VectorRollout.unroll` raised.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from tensordict import TensorDict

from distrl import faults
from distrl.data import keys
from distrl.envs.gym import final_observations, make_vector_env
from distrl.models import sample_actions


class VectorRollout:
    """``num_envs`` copies of ``env_id`` stepped as one vector, with a policy given per unroll.

    ``rank`` and the step count passed to :meth:`unroll` only place injected faults
    (:mod:`distrl.faults`).
    """

    def __init__(self, env_id: str, num_envs: int, seed: int, rank: int):
        self.env_id, self.num_envs, self.seed, self.rank = env_id, num_envs, seed, rank
        self.env_errors = 0  # environment failures so far; each one moves the seed on
        self.env = None
        self.recreate()

    def recreate(self) -> None:
        """(Re)create the vector env; after a failure the seed moves on so it is not replayed."""
        if self.env is not None:
            try:
                self.env.close()
            except Exception:  # a broken env may not close cleanly; it is dropped either way
                pass
        seed = self.seed + 100_000 * self.env_errors
        self.env = make_vector_env(self.env_id, self.num_envs, seed)
        self.obs = torch.as_tensor(self.env.reset(seed=seed)[0], dtype=torch.float32)
        self.ep_return = np.zeros(self.num_envs)
        self.ep_length = np.zeros(self.num_envs, dtype=np.int64)

    def recover(self) -> None:
        """Count an environment failure and start over on a fresh env (the partial unroll is lost)."""
        self.env_errors += 1
        self.recreate()

    def close(self) -> None:
        if self.env is not None:
            self.env.close()

    def _env_step(self, action: np.ndarray, step: int):
        if faults.due("env_error", self.rank, step) and not self.env_errors:
            faults.record("env_error", self.rank, step)
            raise RuntimeError("injected environment failure")
        return self.env.step(action)

    @torch.no_grad()
    def unroll(self, policy: Callable[[torch.Tensor], torch.Tensor], T: int, version: int,
               generator: torch.Generator, step: int = 0) -> tuple[TensorDict, list[float], list[int]]:
        """Step every env ``T`` times with actions sampled from ``policy(obs [B, F]) -> logits [B, A]``.

        Returns the batch-major ``[B, T]`` trajectory (:data:`distrl.data.keys.IMPALA_IN_KEYS`,
        every step stamped with ``version``) and the returns and lengths of the episodes that
        ended during it. ``next`` observations of finished episodes are their true final ones,
        so a truncation can be bootstrapped.
        """
        B = self.num_envs
        obs_dim = self.obs.shape[-1]
        obs = torch.empty(T, B, obs_dim)
        next_obs = torch.empty(T, B, obs_dim)
        action = torch.empty(T, B, dtype=torch.int64)
        log_prob = torch.empty(T, B)
        reward = torch.empty(T, B)
        terminated = torch.empty(T, B, dtype=torch.bool)
        truncated = torch.empty(T, B, dtype=torch.bool)
        returns, lengths = [], []
        for t in range(T):
            a, lp = sample_actions(policy(self.obs), generator)
            o, r, term, trunc, info = self._env_step(a.numpy(), step)
            done = term | trunc
            obs[t], action[t], log_prob[t] = self.obs, a, lp
            next_obs[t] = torch.from_numpy(final_observations(o, info, done))
            reward[t], terminated[t], truncated[t] = torch.from_numpy(r), torch.from_numpy(term), torch.from_numpy(trunc)
            self.ep_return += r
            self.ep_length += 1
            if done.any():
                returns.extend(self.ep_return[done].tolist())
                lengths.extend(self.ep_length[done].tolist())
                self.ep_return[done] = 0.0
                self.ep_length[done] = 0
            self.obs = torch.as_tensor(o, dtype=torch.float32)
        traj = TensorDict(
            {
                keys.OBSERVATION: obs, keys.ACTION: action, keys.ACTION_LOG_PROB: log_prob,
                keys.POLICY_VERSION: torch.full((T, B), version, dtype=torch.int64),
                keys.NEXT: TensorDict({
                    keys.OBSERVATION: next_obs, "reward": reward.unsqueeze(-1),
                    "done": (terminated | truncated).unsqueeze(-1), "terminated": terminated.unsqueeze(-1),
                    "truncated": truncated.unsqueeze(-1),
                }, batch_size=[T, B]),
            },
            batch_size=[T, B],
        ).transpose(0, 1).contiguous()  # batch-major [B, T], as TorchRL
        return traj, returns, lengths
