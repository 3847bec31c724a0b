"""Per-env state the SEED inference server keeps for one env group: the unroll being assembled,
running episode returns, the recurrent core state, and the worker run that owns them.

A worker's step message carries the *outcome* of the step the server chose last time (reward,
termination, truncation, the true final observation of envs whose episode ended) together with
the next observation. :meth:`GroupTrajectories.observe` folds that outcome into the pending step;
:meth:`GroupTrajectories.act` records the step the server has just chosen. After ``T`` folded
steps a ``[B, T]`` chunk is cut, in exactly the layout an IMPALA actor ships, so the learner
runs the unchanged IMPALA loss on it. Only the inference thread calls these methods.
"""

from __future__ import annotations

from typing import Optional

import torch
from tensordict import TensorDict

from distrl.data import keys


class GroupTrajectories:
    """Unroll buffers for ``B`` envs stepped together, time-major ``[T, B, ...]`` until cut.

    Args:
        num_envs: ``B``; obs_shape: ``F`` (an int) or an image's ``(C, H, W)``; unroll_length: ``T``;
        obs_dtype: the observations' dtype (float32, or an image's uint8/bool, kept as it is).
        state_shape: ``S`` of one env's recurrent core state (``(4, H)`` for
            :class:`~distrl.nn.recurrent.RecurrentActorCritic`), or ``None`` for a feed-forward policy.
        action_shape, action_dtype: one env's action as the model's head gives it
            (:mod:`distrl.nn.heads`): ``()`` int64 for discrete actions, ``(A,)`` float32 for a Gaussian.
    """

    def __init__(
        self,
        num_envs: int,
        obs_shape: int | tuple[int, ...],
        unroll_length: int,
        state_shape: Optional[tuple] = None,
        device: torch.device | str = "cpu",
        obs_dtype: torch.dtype = torch.float32,
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
    ):
        B, T = num_envs, unroll_length
        F = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        self.num_envs, self.T, self.device = B, T, torch.device(device)
        z = lambda *shape, dtype=torch.float32: torch.zeros(*shape, dtype=dtype, device=self.device)  # noqa: E731
        self.obs, self.next_obs = z(T, B, *F, dtype=obs_dtype), z(T, B, *F, dtype=obs_dtype)
        self.action, self.version = z(T, B, *action_shape, dtype=action_dtype), z(T, B, dtype=torch.int64)
        self.log_prob, self.reward = z(T, B), z(T, B)
        self.terminated, self.truncated = z(T, B, dtype=torch.bool), z(T, B, dtype=torch.bool)
        self.core_state = None if state_shape is None else z(B, *state_shape)  #: state before the next step
        self._chunk_state = None if state_shape is None else z(B, *state_shape)  #: state before slot 0
        self.ep_return = z(B, dtype=torch.float64)
        self.returns: list[float] = []  #: episodes finished since the last chunk was cut
        self.run_id: Optional[int] = None
        self.restarts = 0  #: times a new run id replaced a known one (a worker restarted)
        self.t = 0  #: slot of the next step
        self.pending = False  #: a chosen step awaits its outcome

    def reset(self, run_id: int) -> None:
        """Forget everything: a new worker run owns these envs (SEED's reset on a fresh run id)."""
        if self.run_id is not None and run_id != self.run_id:
            self.restarts += 1
        self.run_id, self.t, self.pending = run_id, 0, False
        self.ep_return.zero_()
        self.returns.clear()
        if self.core_state is not None:
            self.core_state.zero_()

    def observe(
        self,
        run_id: int,
        obs: torch.Tensor,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        final_obs: torch.Tensor,
    ) -> Optional[tuple[TensorDict, list[float]]]:
        """Fold in the outcome of the pending step; returns ``(chunk, episode returns)`` when one is cut.

        Args:
            obs: ``[B, F]`` the observation the next action is for (a reset observation where an
                episode ended); reward, terminated, truncated: ``[B]``, the pending step's outcome;
            final_obs: ``[D, F]`` the true last observations of the ``D`` envs whose episode ended,
                in env order.
        The chunk is a TensorDict of batch ``[B]`` holding ``"traj"`` ``[B, T]`` (the IMPALA
        trajectory keys) and, for a recurrent core, ``keys.CORE_STATE`` ``[B, *S]``.
        """
        if run_id != self.run_id:  # first message of a run: nothing is pending
            self.reset(run_id)
            return None
        if not self.pending:
            return None
        t, done = self.t, (terminated | truncated).to(self.device)
        self.reward[t], self.terminated[t], self.truncated[t] = reward, terminated, truncated
        self.next_obs[t] = obs
        self.ep_return += self.reward[t]
        if done.any():
            self.next_obs[t][done] = final_obs.to(self.device)  # V-trace bootstraps truncations from it
            self.returns.extend(self.ep_return[done].tolist())
            self.ep_return[done] = 0.0
            if self.core_state is not None:
                self.core_state[done] = 0.0  # the next observation starts a new episode
        self.pending, self.t = False, t + 1
        if self.t < self.T:
            return None
        self.t = 0
        return self._cut()

    def act(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        log_prob: torch.Tensor,
        version: int,
        new_state: Optional[torch.Tensor] = None,
    ) -> None:
        """Record the step just chosen: ``obs [B, F]``, ``action [B]`` (``[B, A]`` continuous), ``log_prob [B]`` under
        parameters ``version``, and the core state after it ``[B, *S]`` (recurrent only)."""
        t = self.t
        if t == 0 and self.core_state is not None:
            self._chunk_state.copy_(self.core_state)  # the learner replays the chunk from here
        self.obs[t], self.action[t], self.log_prob[t] = obs, action, log_prob
        self.version[t] = version
        if new_state is not None:
            self.core_state.copy_(new_state)
        self.pending = True

    def _cut(self) -> tuple[TensorDict, list[float]]:
        T, B = self.T, self.num_envs
        done = self.terminated | self.truncated
        traj = (
            TensorDict(
                {
                    keys.OBSERVATION: self.obs,
                    keys.ACTION: self.action,
                    keys.ACTION_LOG_PROB: self.log_prob,
                    keys.POLICY_VERSION: self.version,
                    keys.NEXT: TensorDict(
                        {
                            keys.OBSERVATION: self.next_obs,
                            keys.STEP_REWARD: self.reward.unsqueeze(-1),
                            keys.STEP_DONE: done.unsqueeze(-1),
                            keys.STEP_TERMINATED: self.terminated.unsqueeze(-1),
                            keys.STEP_TRUNCATED: self.truncated.unsqueeze(-1),
                        },
                        batch_size=[T, B],
                    ),
                },
                batch_size=[T, B],
            )
            .transpose(0, 1)
            .contiguous()
        )  # a copy: the buffers are reused
        chunk = TensorDict({keys.TRAJ: traj}, batch_size=[B])
        if self._chunk_state is not None:
            chunk[keys.CORE_STATE] = self._chunk_state.clone()
        returns, self.returns = self.returns, []
        return chunk, returns
