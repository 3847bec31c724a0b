"""An actor's envs when ``--env`` names a user's TorchRL env factory: stepped by TorchRL's
``Collector``, with :class:`~distrl.roles.env_runner.EnvRunner`'s interface.

The collector runs the actor's own ``act`` function (the same sampling as the gymnasium path)
wrapped as a TorchRL policy, :class:`ActPolicy`, which also writes the policy version of its
weights into every frame. New parameters go in through ``Collector.update_policy_weights_``
(weights and version in one TensorDict, so a frame can never pair new weights with an old
version). The collector's ``[B, T]`` batch is cut down to the keys the learners read
(``distrl/data/keys.py``), and episode returns and lengths are counted from its frames, so a
user's transforms need not include a reward sum.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.collectors import Collector

from distrl.runtime import faults
from distrl.data import keys
from distrl.envs.torchrl_env import as_obs, check_factory, end_flags, make_env, one_hot_actions, quiet_torchrl
from distrl.logging.timing import TimeBudget
from distrl.roles.env_recovery import EnvRecovery, StepWatch

#: observations -> the policy's outputs, as :data:`distrl.roles.env_runner.ActFn` (spelled here, not
#: imported: env_runner imports this module when it builds a collector runner)
ActFn = Callable[[torch.Tensor], dict]


class ActPolicy(nn.Module):
    """``act`` as a TorchRL policy: reads ``observation [B, *F]`` (float32, or an image in its own
    dtype: :func:`~distrl.envs.torchrl_env.as_obs`), writes what ``act`` returns (``action`` one-hot
    when the env takes it so; a box's as it was sampled: the env clips it) and ``policy_version [B]``.

    ``model`` (the actor's network, which ``act`` reads) is a submodule and ``version`` a buffer,
    so ``TensorDict.from_module`` of this module is what ``update_policy_weights_`` writes into."""

    def __init__(self, model: nn.Module, act: ActFn, num_actions: int | None, one_hot: bool, budget: TimeBudget):
        super().__init__()
        self.model, self.act, self.budget = model, act, budget
        self.num_actions, self.one_hot = num_actions, one_hot
        self.register_buffer("version", torch.tensor(-1, dtype=torch.int64))
        self.out_keys: list[str] = []  # what act returned: the trajectory keeps these

    @torch.no_grad()
    def forward(self, td: TensorDictBase) -> TensorDictBase:
        obs = td.get(keys.OBSERVATION)
        with self.budget("policy"):
            out = self.act(as_obs(obs))
        self.out_keys = list(out)
        for k, v in out.items():
            if k == keys.ACTION and self.one_hot:
                v = nn.functional.one_hot(v, self.num_actions)
            td.set(k, v)
        td.set(keys.POLICY_VERSION, self.version.expand(obs.shape[0]).clone())
        return td


class CollectorRunner:
    """``num_envs`` envs of factory ``env_spec`` stepped by a TorchRL ``Collector`` for one actor.

    Same interface as ``EnvRunner`` (``unroll``, ``recover``, ``close``, ``budget``, ``unrolls``,
    ``env_errors``), plus :meth:`load_weights`, the path new parameters take."""

    def __init__(
        self,
        env_spec: str,
        num_envs: int,
        seed: int,
        rank: int,
        model: nn.Module,
        act: ActFn,
        T: int,
        max_failures: int = 10,
        step_timeout_s: float = 0.0,
    ):
        self.env_spec, self.num_envs, self.seed, self.rank, self.T = env_spec, num_envs, seed, rank, T
        self.info = check_factory(env_spec)
        self.unrolls = 0
        self.env_errors = 0
        self.recovery = EnvRecovery(env_spec, max_failures)
        # a batch is T steps of each env: its bound is T step bounds
        self.watch = StepWatch(env_spec, step_timeout_s * T, f"rank {rank}")
        self.budget = TimeBudget()
        self.model, self.act = model, act
        self.collector: Collector | None = None
        self._new_collector()

    def _new_collector(self, version: int = -1) -> None:
        """(Re)build env and collector; after a failure the seed moves on so it is not replayed."""
        self.close()
        env = make_env(self.env_spec, self.num_envs, self.seed + 100_000 * self.env_errors)
        self.policy = ActPolicy(self.model, self.act, self.info.num_actions, one_hot_actions(env), self.budget)
        self.policy.version.fill_(version)
        with quiet_torchrl():  # the collector warns about weight-updater deprecations on every build
            self.collector = Collector(
                env, self.policy, frames_per_batch=self.num_envs * self.T, total_frames=-1, trust_policy=True
            )
        self._batches = iter(self.collector)
        self.ep_return = torch.zeros(self.num_envs)
        self.ep_length = torch.zeros(self.num_envs, dtype=torch.int64)

    def load_weights(self, model: nn.Module, params: TensorDict, version: int) -> None:
        """The learner's ``state_dict`` (flat ``"policy.0.weight"``... keys) and its version, into
        the collector's policy through ``Collector.update_policy_weights_`` (``model`` is the
        policy's own submodule: the call writes into it in place)."""
        weights = TensorDict({"model": params.unflatten_keys("."), "version": torch.tensor(version)})
        self.collector.update_policy_weights_(weights)

    def unroll(self, act: ActFn, T: int) -> tuple[TensorDict, list[float], list[int]]:
        """One collector batch as ``EnvRunner.unroll``'s ``(traj [B, T], returns, lengths)``;
        ``traj`` also holds ``policy_version [B, T]`` (the version of the weights behind each frame)."""
        if act != self.act or T != self.T:  # bound methods compare equal, never identical
            raise ValueError("a CollectorRunner steps the act function and unroll length it was built with")
        self.unrolls += 1
        t0 = time.perf_counter()
        policy_s = self.budget.seconds["policy"]
        with self.watch:
            if faults.env_fails(self.rank, self.unrolls, self.env_errors):
                raise RuntimeError("injected environment failure")
            batch = next(self._batches)  # [B, T]: TorchRL's collectors are batch-major, time last
        self.budget.add("env", time.perf_counter() - t0 - (self.budget.seconds["policy"] - policy_s))
        self.recovery.succeeded()
        return self._trajectory(batch)

    def _trajectory(self, batch: TensorDictBase) -> tuple[TensorDict, list[float], list[int]]:
        """The learners' keys of ``batch [B, T]`` (copied: the collector reuses its buffers)."""
        B, T = self.num_envs, self.T
        nxt = batch.get(keys.NEXT)
        done, terminated, truncated = end_flags(nxt, (B, T))
        reward = nxt.get(keys.STEP_REWARD).reshape(B, T).to(torch.float32)
        # only what the gymnasium path produces: a user's transforms may add keys of their own
        traj = batch.select(keys.OBSERVATION, keys.POLICY_VERSION, *self.policy.out_keys).clone()
        traj.set(keys.OBSERVATION, as_obs(traj.get(keys.OBSERVATION)))
        if self.policy.one_hot:
            traj.set(keys.ACTION, traj.get(keys.ACTION).argmax(-1))
        traj.set(
            keys.NEXT,
            TensorDict(
                {
                    keys.OBSERVATION: as_obs(nxt.get(keys.OBSERVATION)).clone(),
                    keys.STEP_REWARD: reward.unsqueeze(-1),
                    keys.STEP_DONE: (terminated | truncated).unsqueeze(-1),
                    keys.STEP_TERMINATED: terminated.unsqueeze(-1),
                    keys.STEP_TRUNCATED: truncated.unsqueeze(-1),
                },
                batch_size=[B, T],
            ),
        )
        returns, lengths = [], []
        for t in range(T):  # episodes from the frames, carried across unrolls
            self.ep_return += reward[:, t]
            self.ep_length += 1
            ended = done[:, t]
            if ended.any():
                returns.extend(self.ep_return[ended].tolist())
                lengths.extend(self.ep_length[ended].tolist())
                self.ep_return[ended] = 0.0
                self.ep_length[ended] = 0
        return traj, returns, lengths

    def recover(self, error: Exception, who: str) -> None:
        """After a failed :meth:`unroll`: count it, say so in one line, back off, start a fresh env and
        collector with the weights the old one had; raises ``EnvFailedError`` after ``max_failures`` in a row."""
        self.recovery.failed(error, who)
        self.env_errors = self.recovery.failures
        self._new_collector(int(self.policy.version))

    def close(self) -> None:
        self.watch.close()
        if self.collector is not None:
            try:
                with quiet_torchrl():
                    self.collector.shutdown()
            except Exception:  # a broken env may not close cleanly; it is dropped either way
                pass
            self.collector = None
