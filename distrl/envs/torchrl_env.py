"""A user's TorchRL env, named on the command line as ``--env module:function``.

The function (the *factory*) returns a TorchRL ``EnvBase``, transforms included. Two forms:

* ``fn() -> EnvBase`` with ``batch_size []`` (e.g. ``TransformedEnv(GymEnv(...), StepCounter())``):
  distrl steps ``B`` copies of it in a ``SerialEnv``;
* ``fn(num_envs) -> EnvBase`` with ``batch_size [num_envs]``: the factory batches itself (a
  gymnasium vector env inside ``GymWrapper`` is TorchRL's fast layout on CPU).

:func:`check_factory` runs before any process group starts (from ``plan``): it resolves the
path, builds the env, runs TorchRL's ``check_env_specs`` on it and checks that distrl can train
on it (a flat float ``observation`` ``[*B, F]``; discrete actions as ``Categorical`` indices or
``OneHot``, or a continuous box). Every failure is one ``ValueError`` line.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import warnings
from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from tensordict import TensorDictBase
from torchrl.data import Categorical, OneHot, TensorSpec
from torchrl.envs import EnvBase, SerialEnv

from distrl.data import keys
from distrl.envs.info import EnvInfo

EnvFactory = Callable[..., EnvBase]


@contextmanager
def quiet_torchrl() -> Iterator[None]:
    """Within the block, TorchRL's logger shows warnings and errors only and Python warnings are
    ignored. Why: TorchRL logs INFO lines ("check_env_specs succeeded!") and warns about
    deprecations while an env or a collector is built; on the way to a one-line error, or in every
    rank's log, that is noise."""
    logger = logging.getLogger("torchrl")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def load_factory(spec: str) -> EnvFactory:
    """The callable ``spec`` (``"module:function"``) names; ``ValueError`` in one line if it is not there."""
    module, _, name = spec.partition(":")
    try:
        fn = importlib.import_module(module)
    except Exception as e:  # ImportError, or the module itself failed on import
        raise ValueError(
            f"--env {spec}: cannot import module {module!r} ({type(e).__name__}: {_first_line(e)})"
        ) from None
    for part in name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ValueError(f"--env {spec}: module {module!r} has no {name!r}")
    if not callable(fn):
        raise ValueError(f"--env {spec}: {name!r} is not callable")
    return fn


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "no message"


def _takes_num_envs(fn: EnvFactory) -> bool:
    try:
        return "num_envs" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: call it without arguments
        return False


def make_env(spec: str, num_envs: int, seed: int) -> EnvBase:
    """``num_envs`` envs of factory ``spec`` as one env with ``batch_size [num_envs]``, seeded
    from ``seed`` with TorchRL's ``set_seed`` (a ``SerialEnv`` chains its envs' seeds from it)."""
    fn = load_factory(spec)
    with quiet_torchrl():
        if _takes_num_envs(fn):
            env = fn(num_envs=num_envs)
            if tuple(env.batch_size) != (num_envs,):
                raise ValueError(
                    f"--env {spec}: asked for num_envs={num_envs}, the factory returned an env "
                    f"with batch_size {list(env.batch_size)}"
                )
        else:
            env = SerialEnv(num_envs, fn)
        env.set_seed(seed)
    return env


@functools.lru_cache(maxsize=None)
def check_factory(spec: str) -> EnvInfo:
    """Resolve ``spec``, build its env, run ``check_env_specs``; the env's sizes as :class:`EnvInfo`.

    Raises ``ValueError`` in one line for a bad path, a factory that raises, specs that fail
    TorchRL's check, or an env distrl cannot train on. Cached: every role asks for the sizes."""
    from torchrl.envs.utils import check_env_specs

    fn = load_factory(spec)
    with quiet_torchrl():
        try:
            env = fn(num_envs=2) if _takes_num_envs(fn) else fn()
        except Exception as e:
            raise ValueError(f"--env {spec}: the factory raised {type(e).__name__}: {_first_line(e)}") from None
        if not isinstance(env, EnvBase):
            raise ValueError(f"--env {spec}: the factory returned {type(env).__name__}, not a TorchRL EnvBase")
        try:
            try:
                check_env_specs(env, seed=0)
            except Exception as e:
                raise ValueError(
                    f"--env {spec}: torchrl check_env_specs failed: {type(e).__name__}: {_first_line(e)}"
                ) from None
            return _info(spec, env)
        finally:
            if not env.is_closed:
                env.close()


def _info(spec: str, env: EnvBase) -> EnvInfo:
    """Sizes of a checked env, or ``ValueError`` naming what distrl cannot train on."""
    batch = len(env.batch_size)
    if keys.ACTION_MASK in env.observation_spec.keys():  # silently ignored, its agent would play illegal moves
        raise ValueError(
            f"--env {spec}: distrl reads action masks from gymnasium envs (a Dict observation or info), not from a "
            "TorchRL env's action_mask: give the gymnasium id (docs/action-masks.md)"
        )
    if keys.OBSERVATION not in env.observation_spec.keys():
        raise ValueError(
            f"--env {spec}: the env has no {keys.OBSERVATION!r} (it has "
            f"{sorted(map(str, env.observation_spec.keys()))}); rename or concatenate into it with a "
            "transform (RenameTransform, CatTensors)"
        )
    obs = env.observation_spec[keys.OBSERVATION]
    feature_shape = obs.shape[batch:]
    if len(feature_shape) != 1 or not obs.dtype.is_floating_point:
        raise ValueError(
            f"--env {spec}: distrl trains on a flat float observation [F]; this one is "
            f"{list(feature_shape)} {obs.dtype} (add a FlattenObservation or DoubleToFloat transform)"
        )
    action = env.action_spec
    if isinstance(action, (Categorical, OneHot)) and action.shape[batch:] in ((), (action.space.n,)):
        return EnvInfo(int(feature_shape[0]), int(action.space.n), 1, action_encoding(action))
    if action.dtype.is_floating_point and len(action.shape[batch:]) == 1:
        return EnvInfo(int(feature_shape[0]), None, int(action.shape[-1]))
    raise ValueError(
        f"--env {spec}: distrl trains on one discrete action (Categorical or OneHot) or a flat "
        f"continuous action; this env's is {type(action).__name__} {list(action.shape[batch:])}"
    )


def end_flags(nxt: TensorDictBase, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(done, terminated, truncated)`` of a step's ``("next", ...)`` TensorDict, each bool of
    ``shape``; an env that reports only ``done`` has ``terminated = done``, and ``truncated``
    defaults to ``done & ~terminated``."""
    done = nxt.get(keys.STEP_DONE).reshape(shape).bool()
    terminated = nxt.get(keys.STEP_TERMINATED, None)
    terminated = done if terminated is None else terminated.reshape(shape).bool()
    truncated = nxt.get(keys.STEP_TRUNCATED, None)
    truncated = done & ~terminated if truncated is None else truncated.reshape(shape).bool()
    return done, terminated, truncated


def action_encoding(spec: TensorSpec) -> str | None:
    """How an action spec takes discrete actions: ``"one_hot"`` (``OneHot``, GymEnv's default),
    ``"categorical"`` (``Categorical`` indices), or None (not discrete). Checkpoints record it for
    ``load_policy``."""
    return "one_hot" if isinstance(spec, OneHot) else "categorical" if isinstance(spec, Categorical) else None


def one_hot_actions(env: EnvBase) -> bool:
    """Whether the env takes actions one-hot (``OneHot``, GymEnv's default) rather than as indices."""
    return isinstance(env.action_spec, OneHot)


@torch.no_grad()
def evaluate_factory(
    policy_logits, spec: str, episodes: int, seed: int, device: torch.device, max_steps: int = 100_000
) -> list[float]:
    """Greedy returns of ``episodes`` episodes of factory ``spec``: the first episode of each env of
    :func:`make_env` ``(spec, episodes, seed)``, so the same every time for the same seed.

    Args:
        policy_logits: callable ``obs [B, F] -> logits [B, A]``.
    """
    if episodes == 0:
        return []
    env = make_env(spec, episodes, seed)
    try:
        with quiet_torchrl():
            one_hot, n = one_hot_actions(env), check_factory(spec).num_actions
            td = env.reset()
            returns = torch.zeros(episodes)
            running = torch.ones(episodes, dtype=torch.bool)
            for _ in range(max_steps):
                obs = td.get(keys.OBSERVATION).reshape(episodes, -1).to(device, torch.float32)
                action = policy_logits(obs).argmax(-1).cpu()
                td.set(keys.ACTION, torch.nn.functional.one_hot(action, n) if one_hot else action)
                out, td = env.step_and_maybe_reset(td)
                returns += out.get(keys.REWARD).reshape(episodes).float() * running
                running &= ~out.get(keys.DONE).reshape(episodes)
                if not running.any():
                    break
    finally:
        env.close()
    return returns.tolist()
