"""On-device rollout storage and episode statistics for the vecenv learner.

Nothing here reads a tensor on the host: a rollout step is a handful of kernel launches, so the
same code runs on CUDA without a synchronisation per step. Storage is time-major ``[T, B]``:
each step writes one contiguous row per field (GAE is then told ``time_dim=0``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict

from distrl.data import keys


@dataclass
class Rollout:
    """Preallocated ``[T, B]`` buffers, overwritten every update."""

    obs: torch.Tensor  # [T, B, *F] observation the policy saw (images in their own dtype)
    action: torch.Tensor  # [T, B] int64 or [T, B, A] float32
    log_prob: torch.Tensor  # [T, B] log-probability of the action when it was taken
    next_obs: torch.Tensor  # [T, B, *F] true next observation (the final one where an episode ended)
    reward: torch.Tensor  # [T, B]
    terminated: torch.Tensor  # [T, B] bool
    truncated: torch.Tensor  # [T, B] bool

    @classmethod
    def allocate(
        cls,
        t: int,
        b: int,
        obs_shape: tuple[int, ...],
        num_actions: int | None,
        action_dim: int,
        device: torch.device,
        obs_dtype: torch.dtype = torch.float32,
    ) -> "Rollout":
        f32 = dict(dtype=torch.float32, device=device)
        action = (
            torch.zeros(t, b, dtype=torch.int64, device=device)
            if num_actions is not None
            else torch.zeros(t, b, action_dim, **f32)
        )
        flag = dict(dtype=torch.bool, device=device)
        obs = dict(dtype=obs_dtype, device=device)
        return cls(
            torch.zeros(t, b, *obs_shape, **obs),
            action,
            torch.zeros(t, b, **f32),
            torch.zeros(t, b, *obs_shape, **obs),
            torch.zeros(t, b, **f32),
            torch.zeros(t, b, **flag),
            torch.zeros(t, b, **flag),
        )

    def flat(
        self, advantage: torch.Tensor, value_target: torch.Tensor, value: torch.Tensor | None = None
    ) -> TensorDict:
        """The ``[T * B]`` batch a PPO update reads (:data:`distrl.data.keys.PPO_IN_KEYS`, and the
        rollout's ``value`` ``[T, B]`` where a clipped value loss wants it); views, no copies."""
        n = self.reward.numel()
        batch = TensorDict(
            {
                keys.OBSERVATION: self.obs.reshape(n, *self.obs.shape[2:]),
                keys.ACTION: self.action.reshape(n, *self.action.shape[2:]),
                keys.ACTION_LOG_PROB: self.log_prob.reshape(n),
                keys.ADVANTAGE: advantage.reshape(n),
                keys.VALUE_TARGET: value_target.reshape(n),
            },
            batch_size=[n],
            device=self.obs.device,
        )
        if value is not None:
            batch[keys.STATE_VALUE] = value.reshape(n)
        return batch


class EpisodeStats:
    """Running return and length of every env, and the episodes that finished in a rollout.

    ``step`` is called once per env step (device ops only); ``flush`` once per update turns the
    rollout's finished episodes into a fixed-size vector (count, summed lengths, summed returns,
    the ``keep`` most recent returns, NaN-padded) that can be all-gathered and moved to the host
    in one copy.
    """

    def __init__(self, t: int, b: int, device: torch.device, keep: int = 100):
        self.keep = min(keep, t * b)
        self.ret = torch.zeros(b, device=device)
        self.length = torch.zeros(b, device=device)
        self.done_ret = torch.full((t, b), float("nan"), device=device)  # [T, B] return where an episode ended
        self.done_len = torch.zeros(t, b, device=device)  # [T, B] its length there, else 0
        self._order = torch.arange(t * b, device=device)

    def step(self, t: int, reward: torch.Tensor, done: torch.Tensor) -> None:
        """Adds ``reward [B]``; records and restarts the envs where ``done [B]``."""
        self.ret += reward
        self.length += 1
        self.done_ret[t] = torch.where(done, self.ret, float("nan"))
        self.done_len[t] = torch.where(done, self.length, 0.0)
        self.ret.masked_fill_(done, 0.0)
        self.length.masked_fill_(done, 0.0)

    def flush(self) -> torch.Tensor:
        """``[3 + keep]``: episodes finished, their summed lengths and returns, then the ``keep``
        latest returns (oldest first, NaN where fewer finished)."""
        done = ~torch.isnan(self.done_ret).reshape(-1)
        # Latest finished episodes in time-major order without a host-side count: rank by index.
        key = torch.where(done, self._order, -1)
        idx = key.topk(self.keep).indices.flip(0)
        latest = torch.where(key[idx] >= 0, self.done_ret.reshape(-1)[idx], float("nan"))
        head = torch.stack([done.sum().float(), self.done_len.sum(), torch.nansum(self.done_ret)])
        return torch.cat([head, latest])

    @staticmethod
    def unpack(row: torch.Tensor) -> tuple[int, float, list[float]]:
        """Host side of :meth:`flush`: ``(episodes, summed lengths, latest returns)``."""
        latest = row[3:]
        return int(row[0]), float(row[1]), latest[~torch.isnan(latest)].tolist()
