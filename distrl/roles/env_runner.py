"""What every env-stepping actor shares: a vector env stepped ``T`` times with a local policy into a
batch-major ``[B, T]`` trajectory, episode statistics, and recovery from an env that fails.

The IMPALA actor ships the trajectory as it is; the Ape-X actor cuts it into n-step transitions.
Both hand :meth:`EnvRunner.unroll` their own ``act`` function, so the stepping loop, the true final
observation of a finished episode (``SAME_STEP`` autoreset), fault injection and re-creation after
a failure are one piece of code. With ``--env module:function`` (a user's TorchRL env) the same
interface is a TorchRL ``Collector`` instead (:func:`make_env_runner`, ``collector_runner.py``).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.data import keys
from distrl.envs.gym import as_obs, final_observations, is_factory, make_vector_env
from distrl.logging.timing import TimeBudget
from distrl.roles.env_recovery import EnvRecovery, StepWatch

#: ``act(obs [B, *F]) -> {keys.ACTION: [B] int64, other per-step outputs: [B, ...]}``
ActFn = Callable[[torch.Tensor], dict]


class EnvRunner:
    """``num_envs`` copies of ``env_id`` stepped by one actor (rank ``rank``, seeds from ``seed``);
    after ``max_failures`` env failures in a row :meth:`recover` gives up, and a step running past
    ``step_timeout_s`` (0: unbounded) ends the process (``env_recovery.py``)."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        rank: int,
        max_failures: int = 10,
        atari_opts=None,
        step_timeout_s: float = 0.0,
    ):
        self.env_id, self.num_envs, self.seed, self.rank = env_id, num_envs, seed, rank
        self.atari_opts = atari_opts  # how an ALE/* id's envs are built (distrl.config.AtariConfig)
        self.unrolls = 0  # unrolls started, for fault injection
        self.env_errors = 0  # environment failures over the run
        self.recovery = EnvRecovery(env_id, max_failures)
        self.watch = StepWatch(env_id, step_timeout_s, f"rank {rank}")
        #: the actor's time: ``policy`` and ``env`` here, the actor adds ``wait``/``send`` (timing.py)
        self.budget = TimeBudget()
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
        self.env = make_vector_env(self.env_id, self.num_envs, seed, self.atari_opts)
        self.obs = as_obs(self.env.reset(seed=seed)[0])
        self.ep_return = np.zeros(self.num_envs)
        self.ep_length = np.zeros(self.num_envs, dtype=np.int64)

    def _env_step(self, action: np.ndarray):
        with self.watch:
            if faults.env_fails(self.rank, self.unrolls, self.env_errors):
                raise RuntimeError("injected environment failure")
            return self.env.step(action)

    def unroll(self, act: ActFn, T: int) -> tuple[TensorDict, list[float], list[int]]:
        """Step every env ``T`` times with ``act``.

        Returns:
            ``(traj [B, T], returns, lengths)``: the trajectory holds ``observation [B, T, *F]``,
            what ``act`` returned, and ``("next", observation/reward/done/terminated/truncated)``
            (``reward`` and the flags ``[B, T, 1]``); the lists hold the episodes that finished.
            Raises what the env raised; :meth:`recover` then starts a fresh env.
        """
        self.unrolls += 1
        B, obs_shape, obs_dtype = self.num_envs, tuple(self.obs.shape[1:]), self.obs.numpy().dtype
        # numpy buffers, one torch tensor each at the end: a torch index-assignment costs ~6 us here
        # against ~1 us in numpy, and a step makes eight of them (as many us as 3 CartPole steps).
        # Observations keep their dtype: an image stays uint8/bool until the network.
        obs = np.empty((T, B, *obs_shape), obs_dtype)
        next_obs = np.empty((T, B, *obs_shape), obs_dtype)
        reward = np.empty((T, B), np.float32)
        terminated = np.empty((T, B), bool)
        truncated = np.empty((T, B), bool)
        outputs: dict = {}
        returns, lengths = [], []
        clock, policy_s, env_s = time.perf_counter, 0.0, 0.0  # the budget's phases, without a context per step
        with torch.no_grad():
            for t in range(T):
                t0 = clock()
                out = act(self.obs)
                t1 = clock()
                o, r, term, trunc, info = self._env_step(out[keys.ACTION].numpy())
                t2 = clock()
                policy_s += t1 - t0
                env_s += t2 - t1
                done = term | trunc
                obs[t] = self.obs.numpy()
                for k, v in out.items():
                    if k not in outputs:
                        outputs[k] = np.empty((T, *v.shape), v.numpy().dtype)
                    outputs[k][t] = v.numpy()
                next_obs[t] = final_observations(o, info, done)
                reward[t], terminated[t], truncated[t] = r, term, trunc
                self.ep_return += r
                self.ep_length += 1
                if done.any():
                    returns.extend(self.ep_return[done].tolist())
                    lengths.extend(self.ep_length[done].tolist())
                    self.ep_return[done] = 0.0
                    self.ep_length[done] = 0
                self.obs = as_obs(o)
        self.budget.add("policy", policy_s)
        self.budget.add("env", env_s)
        self.recovery.succeeded()
        obs, next_obs, reward = torch.from_numpy(obs), torch.from_numpy(next_obs), torch.from_numpy(reward)
        terminated, truncated = torch.from_numpy(terminated), torch.from_numpy(truncated)
        outputs = {k: torch.from_numpy(v) for k, v in outputs.items()}
        traj = (
            TensorDict(
                {
                    keys.OBSERVATION: obs,
                    **outputs,
                    keys.NEXT: TensorDict(
                        {
                            keys.OBSERVATION: next_obs,
                            keys.STEP_REWARD: reward.unsqueeze(-1),
                            keys.STEP_DONE: (terminated | truncated).unsqueeze(-1),
                            keys.STEP_TERMINATED: terminated.unsqueeze(-1),
                            keys.STEP_TRUNCATED: truncated.unsqueeze(-1),
                        },
                        batch_size=[T, B],
                    ),
                },
                batch_size=[T, B],
            )
            .transpose(0, 1)
            .contiguous()
        )  # batch-major [B, T], as TorchRL
        return traj, returns, lengths

    def load_weights(self, model: torch.nn.Module, params: TensorDict, version: int) -> None:
        """The learner's ``state_dict`` into ``model``, the network ``act`` reads (the actor stamps
        ``version`` itself)."""
        model.load_state_dict(params.to_dict())

    def recover(self, error: Exception, who: str) -> None:
        """After a failed :meth:`unroll`: count it, say so in one line, back off, start a fresh env;
        raises ``EnvFailedError`` after ``max_failures`` in a row."""
        self.recovery.failed(error, who)
        self.env_errors = self.recovery.failures
        self._new_env()

    def close(self) -> None:
        self.watch.close()
        if self.env is not None:
            self.env.close()


def make_env_runner(
    env: str,
    num_envs: int,
    seed: int,
    rank: int,
    model: torch.nn.Module,
    act: ActFn,
    T: int,
    max_failures: int = 10,
    atari_opts=None,
    step_timeout_s: float = 0.0,
):
    """The actor's envs: an :class:`EnvRunner` over gymnasium id ``env`` (the fast path), or a
    ``CollectorRunner`` (TorchRL ``Collector``) when ``env`` names a TorchRL env factory. ``model``
    is the network ``act`` reads, ``T`` the unroll length, ``max_failures`` ``run.env_max_failures``,
    ``atari_opts`` the config's ``atari`` section, ``step_timeout_s`` ``run.env_step_timeout_s``."""
    if is_factory(env):
        from distrl.roles.collector_runner import CollectorRunner

        return CollectorRunner(env, num_envs, seed, rank, model, act, T, max_failures, step_timeout_s)
    return EnvRunner(env, num_envs, seed, rank, max_failures, atari_opts, step_timeout_s)
