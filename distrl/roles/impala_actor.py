"""The IMPALA actor: steps a vector of envs with a local copy of the policy and ships
``[B, T]`` trajectories to the learner.

One message per unroll carries the trajectory, the actor's policy version and its finished
episodes; the learner's reply carries newer parameters when there are any. So parameters are
picked up without a separate call, and the actor keeps stepping while a send is in flight (one
send outstanding at a time: the bound on its memory and on the learner's queue pressure).
"""
from __future__ import annotations


import numpy as np
import torch
from tensordict import TensorDict

from distrl import faults
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
        self.seed = self.cfg.run.seed + 1000 * ctx.rank
        self.generator = torch.Generator().manual_seed(self.seed)
        self.unrolls = 0  # this actor's step count, for fault injection
        self.env_errors = 0  # environment failures since the last message
        self.env = None
        self._new_env()

    def _new_env(self) -> None:
        """(Re)create the vector env; after a failure the seed moves on so it is not replayed."""
        if self.env is not None:
            try:
                self.env.close()
            except Exception:  # a broken env may not close cleanly; it is dropped either way
                pass
        seed = self.seed + 100_000 * self.env_errors
        self.env = make_vector_env(self.cfg.run.env, self.num_envs, seed)
        self.obs = torch.as_tensor(self.env.reset(seed=seed)[0], dtype=torch.float32)
        self.ep_return = np.zeros(self.num_envs)
        self.ep_length = np.zeros(self.num_envs, dtype=np.int64)

    def _env_step(self, action: np.ndarray):
        if faults.due("env_error", self.ctx.rank, self.unrolls) and not self.env_errors:
            faults.record("env_error", self.ctx.rank, self.unrolls)
            raise RuntimeError("injected environment failure")
        return self.env.step(action)

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
            o, r, term, trunc, info = self._env_step(a.numpy())
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
        if faults.due("bad_obs", self.ctx.rank, self.unrolls):
            traj[keys.OBSERVATION] = torch.zeros(B, T, obs_dim + 1, dtype=torch.float64)
        return TensorDict(
            traj=traj, version=torch.tensor(self.version), env_errors=torch.tensor(self.env_errors),
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
                faults.maybe_signal(self.ctx.rank, self.unrolls)
                self.unrolls += 1
                try:
                    msg = self._unroll()
                except Exception as e:  # the env failed: drop the partial trajectory, start over
                    self.env_errors += 1
                    print(f"[actor {self.ctx.rank}] environment failed ({type(e).__name__}: {e}); "
                          "recreating it and dropping the partial trajectory", flush=True)
                    self._new_env()
                    continue
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
            if self.env is not None:
                self.env.close()
