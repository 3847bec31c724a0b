"""The IMPALA actor: steps a vector of envs with a local copy of the policy and ships
``[B, T]`` trajectories to the learner.

One message per unroll carries the trajectory, the actor's policy version and its finished
episodes; the learner's reply carries newer parameters when there are any. So parameters are
picked up without a separate call, and the actor keeps stepping while a send is in flight (one
send outstanding at a time: the bound on its memory and on the learner's queue pressure).
"""
from __future__ import annotations

import time

import numpy as np
import torch
from tensordict import TensorDict

from distrl.architectures.base import RoleContext
from distrl.data import keys
from distrl.envs.gym import env_info, final_observations, make_vector_env
from distrl.models import ActorCritic, sample_actions
from distrl.transport.base import TransportError


class ImpalaActor:
    """Behaviour policy + vector env; see the module docstring for the protocol."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg = ctx, ctx.cfg
        algo = self.cfg.algo
        self.learner = ctx.ranks_of("learner")[0]
        self.num_envs, self.T = algo.envs_per_actor, algo.unroll_length
        info = env_info(self.cfg.run.env)
        self.model = ActorCritic(info.obs_dim, info.num_actions, self.cfg.net)
        self.policy = self.model.policy
        self.version = -1  # no parameters yet: the first reply carries them
        seed = self.cfg.run.seed + 1000 * ctx.rank
        self.env = make_vector_env(self.cfg.run.env, self.num_envs, seed)
        self.generator = torch.Generator().manual_seed(seed)
        self.obs = torch.as_tensor(self.env.reset(seed=seed)[0], dtype=torch.float32)
        self.ep_return = np.zeros(self.num_envs)
        self.ep_length = np.zeros(self.num_envs, dtype=np.int64)

    def _load(self, reply: TensorDict) -> None:
        if "params" in reply.keys():
            self.model.load_state_dict(reply["params"].to_dict())
            self.version = int(reply["version"])

    def _unroll(self) -> TensorDict:
        """Step every env ``T`` times; returns the ``[B, T]`` trajectory with episode stats."""
        B, T = self.num_envs, self.T
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
            with torch.no_grad():
                a, lp = sample_actions(self.policy(self.obs), self.generator)
            o, r, term, trunc, info = self.env.step(a.numpy())
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
                keys.POLICY_VERSION: torch.full((T, B), self.version, dtype=torch.int64),
                keys.NEXT: TensorDict({
                    keys.OBSERVATION: next_obs, "reward": reward.unsqueeze(-1),
                    "done": (terminated | truncated).unsqueeze(-1), "terminated": terminated.unsqueeze(-1),
                    "truncated": truncated.unsqueeze(-1),
                }, batch_size=[T, B]),
            },
            batch_size=[T, B],
        ).transpose(0, 1).contiguous()  # batch-major [B, T], as TorchRL
        return TensorDict(
            traj=traj, version=torch.tensor(self.version),
            **{keys.EPISODE_RETURNS: torch.tensor(returns, dtype=torch.float32),
               keys.EPISODE_LENGTHS: torch.tensor(lengths, dtype=torch.int64),
               keys.ACTOR_RANK: torch.tensor(self.ctx.rank)},
        )

    def run(self) -> None:
        t = self.ctx.transport
        timeout = self.cfg.transport.call_timeout_s
        try:
            self._load(t.call_sync(self.learner, "hello", TensorDict(rank=torch.tensor(self.ctx.rank)), timeout))
            pending = None
            while True:
                msg = self._unroll()
                if pending is not None:  # at most one send in flight
                    reply = pending.result()
                    if bool(reply["stop"]):
                        return
                    self._load(reply)
                pending = t.call(self.learner, "put_trajectory", msg, timeout)
        except TransportError as e:
            # The learner is gone or told us nothing in time: it owns the run, so we end.
            print(f"[actor {self.ctx.rank}] learner unreachable, exiting: {e}", flush=True)
        finally:
            self.env.close()
