"""One stepping interface over the torch-native suite and any batched TorchRL env.

The vecenv learner steps a :class:`BatchedEnv`: ``B`` envs on one device, automatic reset,
plain tensors in and out. Two implementations:

* :class:`NativeEnv` wraps a :class:`~distrl.envs.torch_envs.TorchBatchedEnv` (or a MinAtar
  :class:`~distrl.envs.torch_envs.TorchGridEnv`) and calls its lean
  ``step_autoreset`` (no TensorDict or spec work per step);
* :class:`TorchRLEnv` wraps any TorchRL ``EnvBase`` with ``batch_size [B]`` (Isaac Lab, Brax,
  Genesis, ``SerialEnv`` of ``GymEnv``...) through ``step_and_maybe_reset``.

A user env comes in through a factory ``fn(env_id, num_envs, device, seed) -> EnvBase`` named as
``"module:function"`` (``algo.env_factory``); :func:`gym_serial_env` is one, for any gymnasium id,
and :func:`minatar_gymnax_env` the torch MinAtar games under gymnax's rules.
A factory may also return a :class:`BatchedEnv` itself, as :func:`gym_vector_env` does
(gymnasium's ``SyncVectorEnv``: the CPU-env baseline of the benchmark).
"""

from __future__ import annotations

import importlib
from typing import Callable

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Categorical, OneHot
from torchrl.envs import EnvBase

from distrl.data import keys
from distrl.envs.atari import is_atari
from distrl.envs.torch_envs import TORCH_ENV_IDS, TorchBatchedEnv, TorchGridEnv, make_torch_env

EnvFactory = Callable[[str, int, torch.device, int], EnvBase]
StepOut = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class BatchedEnv:
    """``B`` envs stepped together. Shapes: observations ``[B, *obs_shape]`` (float32 vectors, or
    images ``[B, C, H, W]`` in their own dtype), actions ``[B]`` int64 (``num_actions`` set) or
    ``[B, A]`` float32, reward ``[B]`` float32, flags ``[B]`` bool."""

    num_envs: int
    obs_shape: tuple[int, ...]
    obs_dtype: torch.dtype = torch.float32
    num_actions: int | None  #: None for continuous actions
    action_dim: int
    max_episode_steps: int | None  #: the time limit if the env declares one (bounds evaluation)
    #: whether observations end with the env's action mask (distrl/envs/action_mask.py; gymnasium ids only)
    action_mask: bool = False

    def reset(self) -> torch.Tensor:
        """Resets every env; returns the first observation ``[B, *obs_shape]``."""
        raise NotImplementedError

    def step(self, action: torch.Tensor) -> StepOut:
        """``(next_obs, reward, terminated, truncated, obs)``: ``next_obs`` is the true next
        observation (bootstrap from it on truncation); ``obs`` equals it except in finished envs,
        where it is the first observation of their next episode (feed it to the policy)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class NativeEnv(BatchedEnv):
    """A torch-native env, stepped through ``step_autoreset``."""

    def __init__(self, env: TorchBatchedEnv | TorchGridEnv):
        self.env = env
        self.num_envs = env.num_envs
        obs = env.observation_spec[keys.OBSERVATION]
        self.obs_shape, self.obs_dtype = tuple(obs.shape[1:]), obs.dtype
        spec = env.action_spec
        self.num_actions = int(spec.space.n) if isinstance(spec, Categorical) else None
        self.action_dim = 1 if self.num_actions else spec.shape[-1]
        self.max_episode_steps = env.max_episode_steps

    def reset(self) -> torch.Tensor:
        return self.env.reset_all()

    def step(self, action: torch.Tensor) -> StepOut:
        next_obs, reward, term, trunc, obs = self.env.step_autoreset(action)
        return next_obs, reward.squeeze(-1), term.squeeze(-1), trunc.squeeze(-1), obs


class TorchRLEnv(BatchedEnv):
    """Any TorchRL ``EnvBase`` with ``batch_size [B]``, stepped with ``step_and_maybe_reset``.

    Discrete actions may be ``Categorical`` (indices) or ``OneHot`` specs; continuous actions are
    clipped to a ``Bounded`` spec's box. Observations are read from ``obs_key``: images ``[C, H, W]``
    of uint8/bool as they are, anything else flattened to float32 ``[F]``.
    """

    def __init__(self, env: EnvBase, device: torch.device, obs_key: str = keys.OBSERVATION):
        if len(env.batch_size) != 1:
            raise ValueError(f"vecenv needs a TorchRL env with batch_size [B], got {list(env.batch_size)}")
        self.env, self.device, self.obs_key = env, torch.device(device), obs_key
        self.num_envs = env.batch_size[0]
        if obs_key not in env.observation_spec.keys():
            raise ValueError(
                f"env has no observation {obs_key!r} (has {list(env.observation_spec.keys())}); set algo.obs_key"
            )
        obs = env.observation_spec[obs_key]
        self.image = len(obs.shape) == 4 and obs.dtype in (torch.uint8, torch.bool)
        self.obs_shape = tuple(obs.shape[1:]) if self.image else (int(torch.Size(obs.shape[1:]).numel()),)
        self.obs_dtype = obs.dtype if self.image else torch.float32
        spec = env.action_spec
        self.one_hot = isinstance(spec, OneHot)
        if isinstance(spec, (Categorical, OneHot)):
            self.num_actions, self.action_dim, self.low = int(spec.space.n), 1, None
        elif spec.dtype.is_floating_point:
            self.num_actions, self.action_dim = None, spec.shape[-1]
            bounded = isinstance(spec, Bounded)
            self.low = spec.space.low.to(self.device) if bounded else None
            self.high = spec.space.high.to(self.device) if bounded else None
        else:
            raise ValueError(
                f"vecenv supports Categorical, OneHot and continuous action specs, got {type(spec).__name__}"
            )
        self.max_episode_steps = None
        self._td: TensorDictBase | None = None

    def _obs(self, td: TensorDictBase) -> torch.Tensor:
        return td.get(self.obs_key).reshape(self.num_envs, *self.obs_shape).to(self.device, self.obs_dtype)

    def reset(self) -> torch.Tensor:
        self._td = self.env.reset()
        return self._obs(self._td)

    def step(self, action: torch.Tensor) -> StepOut:
        if self.one_hot:
            action = torch.nn.functional.one_hot(action, self.num_actions)
        elif self.num_actions is None and self.low is not None:
            action = action.clamp(self.low, self.high)
        self._td.set(keys.ACTION, action.to(self.env.device) if self.env.device is not None else action)
        td, self._td = self.env.step_and_maybe_reset(self._td)
        b = self.num_envs
        term = td.get(keys.TERMINATED, None)
        term = (td.get(keys.DONE) if term is None else term).reshape(b).to(self.device)
        trunc = td.get(keys.TRUNCATED, None)
        trunc = torch.zeros_like(term) if trunc is None else trunc.reshape(b).to(self.device)
        reward = td.get(keys.REWARD).reshape(b).to(self.device, torch.float32)
        return self._obs(td.get(keys.NEXT)), reward, term, trunc, self._obs(self._td)

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()


def load_factory(spec: str) -> EnvFactory:
    """The callable named by ``"module:function"``; ``ValueError`` in one line if it is not there."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"algo.env_factory must be 'module:function', got {spec!r}")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"algo.env_factory {spec!r} cannot be loaded: {e}") from None
    if not callable(fn):
        raise ValueError(f"algo.env_factory {spec!r} is not callable")
    return fn


def make_batched_env(
    env_id: str,
    num_envs: int,
    device: torch.device,
    seed: int,
    factory: str = "",
    obs_key: str = keys.OBSERVATION,
    atari_opts=None,
) -> BatchedEnv:
    """``num_envs`` envs on ``device``: through ``factory`` when given, else the torch-native suite;
    an id with no torch version (MuJoCo's, ``ALE/*``...) in gymnasium's vector env on the CPU
    (:class:`GymVectorEnv`; ale-py's C++ one for ``ALE/*``, options ``atari_opts``)."""
    if factory:
        env = load_factory(factory)(env_id, num_envs, device, seed)
        if isinstance(env, BatchedEnv):
            return env
        # The type, not hasattr(env, "step_autoreset"): a TransformedEnv forwards unknown attributes
        # to its base env, and calling the base's step_autoreset would silently skip the transforms.
        if isinstance(env, (TorchBatchedEnv, TorchGridEnv)):
            return NativeEnv(env)
        return TorchRLEnv(env, device, obs_key)
    if is_atari(env_id) or env_id not in TORCH_ENV_IDS:
        # no torch version: gymnasium's vector env on the CPU (ale-py's C++ one for ALE/* ids), so
        # PPO with DDP trains MuJoCo and every other gymnasium id too, at the CPU env's speed
        return GymVectorEnv(env_id, num_envs, device, seed, atari_opts)
    return NativeEnv(make_torch_env(env_id, num_envs, device=device, seed=seed))


def gym_serial_env(env_id: str, num_envs: int, device: torch.device, seed: int) -> EnvBase:
    """A factory for any gymnasium id: TorchRL ``SerialEnv`` of ``GymEnv`` (CPU, in-process, slow;
    for checking the generic path, and a template for Isaac Lab / Brax / Genesis wrappers)."""
    from torchrl.envs import GymEnv, SerialEnv

    env = SerialEnv(num_envs, lambda: GymEnv(env_id))
    env.set_seed(seed)
    return env


class GymVectorEnv(BatchedEnv):
    """gymnasium's ``SyncVectorEnv`` (numpy, CPU) behind the same interface: the CPU-env baseline
    of ``experiments/bench_vecenv.py``, and a fast way to train on any gymnasium id."""

    def __init__(self, env_id: str, num_envs: int, device: torch.device, seed: int, atari_opts=None):
        from distrl.envs.gym import env_info, make_vector_env

        info = env_info(env_id)
        self.env, self.device, self.seed = (
            make_vector_env(env_id, num_envs, seed, atari_opts),
            torch.device(device),
            seed,
        )
        self.num_envs, self.num_actions, self.action_dim = num_envs, info.num_actions, info.action_dim
        self.obs_shape, self.obs_dtype = info.shape, info.obs_dtype or torch.float32
        self.max_episode_steps, self.action_mask = None, info.action_mask
        space = self.env.single_action_space
        self.low, self.high = (None, None) if self.num_actions else (space.low, space.high)

    def _t(self, x, dtype=torch.float32) -> torch.Tensor:
        return torch.as_tensor(x).to(self.device, dtype).reshape(self.num_envs, -1).squeeze(-1)

    def _obs(self, x) -> torch.Tensor:
        return torch.as_tensor(x).to(self.device, self.obs_dtype).reshape(self.num_envs, *self.obs_shape)

    def reset(self) -> torch.Tensor:
        obs, _ = self.env.reset(seed=self.seed)
        return self._obs(obs)

    def step(self, action: torch.Tensor) -> StepOut:
        from distrl.envs.gym import final_observations

        a = action.cpu().numpy()
        if self.low is not None:
            a = a.clip(self.low, self.high)
        obs, reward, term, trunc, info = self.env.step(a)
        next_obs = final_observations(obs, info, term | trunc)
        return (
            self._obs(next_obs),
            self._t(reward),
            self._t(term, torch.bool),
            self._t(trunc, torch.bool),
            self._obs(obs),
        )

    def close(self) -> None:
        self.env.close()


def gym_vector_env(env_id: str, num_envs: int, device: torch.device, seed: int) -> BatchedEnv:
    """A factory for any gymnasium id: :class:`GymVectorEnv` (``SyncVectorEnv``, CPU)."""
    return GymVectorEnv(env_id, num_envs, device, seed)


#: gymnax's MinAtar (April 2023, the envs of its README's PPO table) ended episodes here
GYMNAX_MINATAR_MAX_STEPS = 1_000


def minatar_gymnax_env(env_id: str, num_envs: int, device: torch.device, seed: int) -> TorchGridEnv:
    """A factory of the torch MinAtar games under gymnax's rules: no sticky actions and episodes
    cut at 1,000 steps (Freeway uncut: its clock ends it at 2,501, gymnax's at 2,500). The env
    gymnax-blines' PPO row was trained and scored on; ``distrl eval --sticky-actions 0
    --max-steps 1000`` scores a run on the same rules."""
    limit = None if env_id.startswith("MinAtar/Freeway") else GYMNAX_MINATAR_MAX_STEPS
    return make_torch_env(env_id, num_envs, device=device, seed=seed, sticky_action_prob=0.0, max_episode_steps=limit)


def torchrl_native_env(env_id: str, num_envs: int, device: torch.device, seed: int) -> EnvBase:
    """A torch-native env behind a (no-op) TorchRL transform: stepped through the generic
    ``step_and_maybe_reset`` path, not ``step_autoreset``. For tests and comparisons."""
    from torchrl.envs import StepCounter, TransformedEnv

    return TransformedEnv(make_torch_env(env_id, num_envs, device=device, seed=seed), StepCounter())


@torch.no_grad()
def evaluate_greedy(
    env: BatchedEnv,
    greedy: Callable[[torch.Tensor], torch.Tensor],
    max_steps: int = 100_000,
    epsilon: float = 0.0,
    seed: int = 0,
) -> list[float]:
    """Return of the first episode of each of ``env``'s ``B`` envs under ``greedy(obs [B, *F])``,
    a uniformly random action instead with probability ``epsilon`` (discrete actions; Atari's habit).

    Stops when every env has finished an episode (checked every 64 steps, to keep host syncs off
    the step path) or after ``max_steps`` (the env's time limit when it declares one).
    """
    limit = env.max_episode_steps or max_steps
    obs = env.reset()
    returns = torch.zeros(env.num_envs, device=obs.device)
    running = torch.ones(env.num_envs, dtype=torch.bool, device=obs.device)
    gen = torch.Generator(device=obs.device).manual_seed(seed)
    for t in range(limit):
        action = greedy(obs)
        if epsilon:
            explore = torch.rand(env.num_envs, generator=gen, device=obs.device) < epsilon
            random = torch.randint(env.num_actions, (env.num_envs,), generator=gen, device=obs.device)
            action = torch.where(explore, random, action)
        _, reward, term, trunc, obs = env.step(action)
        returns += reward * running
        running &= ~(term | trunc)
        if t % 64 == 63 and not running.any():
            break
    return returns.tolist()
