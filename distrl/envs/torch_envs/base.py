"""The shared machinery of the torch-native batched environments.

A ``TorchBatchedEnv`` holds ``B`` copies of one classic-control system as tensors on one
device (the Isaac Gym paradigm): one call steps all of them. Each subclass supplies two
pure functions (dynamics, observation), the box its initial states are drawn from, and its
action spec; this module turns them into

* a TorchRL ``EnvBase`` (``_step`` / ``_reset`` with the ``"_reset"`` partial-reset mask /
  ``_set_seed``), so rollouts, transforms and collectors work unchanged, and
* a lean path (``reset_all`` / ``step_autoreset``) that skips TensorDict and spec
  bookkeeping, for an on-device PPO loop.

Nothing in a step reads a tensor value on the host (no ``.item()``, no branch on data), so
the same code runs on CUDA without synchronising.

Randomness: every step draws one batch of candidate initial states, whether or not an env
finished, and a partial reset takes finished envs' new state from that batch. The generator
is therefore consumed on a fixed schedule (one full reset, then one draw per step): the
random stream does not depend on which envs finished or on which path ran the step, so the
same seed gives the same episodes through ``step_autoreset`` and ``step_and_maybe_reset``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torchrl.data import Bounded, Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs import EnvBase

from distrl.data import keys

__all__ = ["TorchBatchedEnv", "uniform"]


def uniform(generator: torch.Generator, low: Tensor, high: Tensor, num_envs: int) -> Tensor:
    """``[B, S]`` samples of ``low + (high - low) * U[0, 1)`` (numpy's ``uniform``), from
    bounds ``low``, ``high`` of shape ``[S]`` on the generator's device."""
    u = torch.rand((num_envs, low.shape[0]), generator=generator, device=low.device, dtype=low.dtype)
    return low + (high - low) * u


@dataclass(slots=True)
class _Sim:
    """The mutable simulator tensors, kept off ``nn.Module.__setattr__`` (slow per step)."""

    state: Tensor  # [B, S] physical state, in the env's dtype
    elapsed: Tensor  # [B] int64, steps since the last reset (gymnasium's TimeLimit counter)
    pending: Tensor  # [B, S] initial states that the next partial reset hands out


class TorchBatchedEnv(EnvBase):
    """``B`` copies of one system, stepped as tensors; see the module docstring.

    Subclasses set the class attributes below and implement ``_make_action_spec``.

    Args:
        num_envs: ``B``, the number of envs stepped together.
        device: where state, specs and outputs live.
        seed: seed of the env's ``torch.Generator``; ``None`` draws a nondeterministic one.
        max_episode_steps: the time limit (truncation) in steps; defaults to gymnasium's
            registered ``TimeLimit`` for ``gym_id``.
        dtype: dtype of the physical state and dynamics. Observations and rewards are always
            float32; float64 reproduces gymnasium's (numpy float64) arithmetic more closely.
    """

    gym_id: ClassVar[str]
    default_max_episode_steps: ClassVar[int]
    # Observation bounds of gymnasium's Box, shape [F]; infinite entries make the spec Unbounded.
    obs_low: ClassVar[tuple[float, ...]]
    obs_high: ClassVar[tuple[float, ...]]
    # Initial states are uniform in [reset_low, reset_high], shape [S], as in gymnasium.
    reset_low: ClassVar[tuple[float, ...]]
    reset_high: ClassVar[tuple[float, ...]]
    # Pure functions: (state [B, S], action) -> (next_state, reward [B], terminated [B]).
    dynamics: ClassVar[Callable[[Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]]
    # Pure function: state [B, S] -> observation [B, F] in the state's dtype.
    observe: ClassVar[Callable[[Tensor], Tensor]]

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        max_episode_steps: int | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if max_episode_steps is None:
            max_episode_steps = self.default_max_episode_steps
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        self.num_envs = num_envs
        self.max_episode_steps = int(max_episode_steps)
        self.state_dtype = dtype
        self._make_specs()
        # Cached on the device: building them per step would copy from the host every step.
        self._reset_low = torch.tensor(self.reset_low, dtype=dtype, device=self.device)
        self._reset_high = torch.tensor(self.reset_high, dtype=dtype, device=self.device)
        self._generator = torch.Generator(device=self.device)
        self._sim = _Sim(state=None, elapsed=None, pending=None)  # filled by _set_seed
        self._set_seed(seed)

    # ---- what a subclass provides ------------------------------------------------------

    def _make_action_spec(self) -> TensorSpec:
        """The action spec: ``Categorical(n, shape=(B,))`` or ``Bounded`` ``[B, A]``."""
        raise NotImplementedError

    def initial_state(self) -> Tensor:
        """Draws a fresh initial state for every env from gymnasium's distribution.

        Returns:
            ``[B, S]`` in ``state_dtype``, drawn from ``self._generator``.
        """
        return uniform(self._generator, self._reset_low, self._reset_high, self.num_envs)

    # ---- specs -------------------------------------------------------------------------

    def _make_specs(self) -> None:
        n, dev = self.num_envs, self.device
        low = torch.tensor(self.obs_low, dtype=torch.float32)
        high = torch.tensor(self.obs_high, dtype=torch.float32)
        shape = (n, low.shape[0])
        if torch.isfinite(low).all() and torch.isfinite(high).all():
            obs = Bounded(
                low=low.expand(shape).clone(),
                high=high.expand(shape).clone(),
                shape=shape,
                dtype=torch.float32,
                device=dev,
            )
        else:
            obs = Unbounded(shape=shape, dtype=torch.float32, device=dev)
        self.observation_spec = Composite(observation=obs, shape=(n,), device=dev)
        self.action_spec = self._make_action_spec()
        self.reward_spec = Unbounded(shape=(n, 1), dtype=torch.float32, device=dev)
        flag = Categorical(2, shape=(n, 1), dtype=torch.bool, device=dev)
        self.done_spec = Composite(
            done=flag.clone(), terminated=flag.clone(), truncated=flag.clone(), shape=(n,), device=dev
        )

    # ---- state access (tests, checkpoints, syncing with a reference implementation) ----

    @property
    def sim_state(self) -> Tensor:
        """The physical state of every env, ``[B, S]`` (a copy)."""
        return self._sim.state.clone()

    @sim_state.setter
    def sim_state(self, state: Tensor) -> None:
        self._sim.state = state.to(device=self.device, dtype=self.state_dtype).clone()

    @property
    def elapsed_steps(self) -> Tensor:
        """Steps since each env's last reset, ``[B]`` int64 (a copy)."""
        return self._sim.elapsed.clone()

    def _observation_of_sim(self) -> Tensor:
        """Float32 observation of the live state, never sharing its storage.

        For CartPole and MountainCar the observation *is* the state: handing out the live
        tensor would let an in-place edit by a caller or a transform corrupt the simulator.
        """
        obs = self.observe(self._sim.state).float()
        return obs.clone() if obs is self._sim.state else obs

    # ---- lean path ---------------------------------------------------------------------

    def reset_all(self) -> Tensor:
        """Resets every env (one draw from the generator).

        Returns:
            observation ``[B, *F]`` float32.
        """
        self._sim.state = self.initial_state()
        self._sim.elapsed = torch.zeros_like(self._sim.elapsed)
        return self._observation_of_sim()

    def step_autoreset(self, action: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Steps every env and resets those that finished, without TensorDicts.

        Args:
            action: ``[B]`` int64 indices (discrete envs) or ``[B, A]`` floats (continuous).

        Returns:
            ``(next_obs, reward, terminated, truncated, obs_after_reset)``: ``next_obs``
            ``[B, *F]`` float32 is the true observation reached by the step (bootstrap from
            it on truncation); ``reward`` ``[B, 1]`` float32; ``terminated`` and
            ``truncated`` ``[B, 1]`` bool (both may be set); ``obs_after_reset`` ``[B, *F]``
            float32 equals ``next_obs`` except in finished envs, where it is the first
            observation of their next episode: feed it to the policy next.
        """
        sim = self._sim
        next_state, reward, terminated = self.dynamics(sim.state, action)
        elapsed = sim.elapsed + 1
        truncated = elapsed >= self.max_episode_steps
        done = terminated | truncated
        sim.pending = self.initial_state()
        sim.state = torch.where(done.unsqueeze(-1), sim.pending, next_state)
        sim.elapsed = torch.where(done, 0, elapsed)
        next_obs = self.observe(next_state).float()
        obs_after_reset = torch.where(done.unsqueeze(-1), self.observe(sim.pending).float(), next_obs)
        return (
            next_obs,
            reward.float().unsqueeze(-1),
            terminated.unsqueeze(-1),
            truncated.unsqueeze(-1),
            obs_after_reset,
        )

    # ---- TorchRL EnvBase ---------------------------------------------------------------

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        sim = self._sim
        next_state, reward, terminated = self.dynamics(sim.state, tensordict.get(keys.ACTION))
        sim.elapsed = sim.elapsed + 1
        truncated = sim.elapsed >= self.max_episode_steps
        sim.state = next_state
        # Drawn now, used by the partial reset that follows (see the module docstring).
        sim.pending = self.initial_state()
        terminated = terminated.unsqueeze(-1)
        truncated = truncated.unsqueeze(-1)
        return TensorDict(
            {
                keys.OBSERVATION: self._observation_of_sim(),
                keys.STEP_REWARD: reward.float().unsqueeze(-1),
                keys.STEP_DONE: terminated | truncated,
                keys.STEP_TERMINATED: terminated,
                keys.STEP_TRUNCATED: truncated,
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDictBase:
        sim = self._sim
        reset = None if tensordict is None else tensordict.get(keys.RESET, None)
        if reset is None:
            sim.state = self.initial_state()
            sim.elapsed = torch.zeros_like(sim.elapsed)
        else:
            # A mask, not an index: selecting the finished envs would need their count on
            # the host.
            mask = reset.reshape(self.num_envs)
            sim.state = torch.where(mask.unsqueeze(-1), sim.pending, sim.state)
            sim.elapsed = torch.where(mask, 0, sim.elapsed)
        # Envs outside the mask keep their entries: EnvBase merges with the input by the mask.
        flag = torch.zeros((self.num_envs, 1), dtype=torch.bool, device=self.device)
        return TensorDict(
            {
                keys.OBSERVATION: self._observation_of_sim(),
                keys.STEP_DONE: flag,
                keys.STEP_TERMINATED: flag.clone(),
                keys.STEP_TRUNCATED: flag.clone(),
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _set_seed(self, seed: int | None) -> None:
        """Reseeds the generator and re-initialises every env, as if built with ``seed``."""
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(int(seed))
        sim = self._sim
        sim.state = self.initial_state()
        sim.elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        sim.pending = self.initial_state()

    def to(self, device: torch.device | str) -> TorchBatchedEnv:
        """Moves specs and simulator state; the generator is reseeded from the old one."""
        device = torch.device(device)
        old = self.device
        super().to(device)
        if self.device == old:
            return self
        seed = int(torch.randint(2**62, (1,), generator=self._generator, device=old))
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        sim, dev = self._sim, self.device
        sim.state, sim.elapsed, sim.pending = (sim.state.to(dev), sim.elapsed.to(dev), sim.pending.to(dev))
        self._reset_low, self._reset_high = self._reset_low.to(dev), self._reset_high.to(dev)
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.gym_id}, num_envs={self.num_envs}, "
            f"device={self.device}, max_episode_steps={self.max_episode_steps}, "
            f"dtype={self.state_dtype})"
        )
