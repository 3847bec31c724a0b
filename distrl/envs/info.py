"""What an ``--env`` names, before anything is built: a gymnasium id (``CartPole-v1``, or gymnasium's
``module:EnvId``, whose module registers the id on import) or a TorchRL env factory
(``module:function``), told apart by :func:`is_factory`; and the sizes every role asks of it
(:class:`EnvInfo`).

It imports nothing of distrl: ``gym.py`` (gymnasium ids) and ``torchrl_env.py`` (factories) both
build on it, and ``gym.py`` hands a factory to ``torchrl_env.py``, never the other way round.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Any

import gymnasium as gym


#: the kinds of env an ``--env`` names (:attr:`EnvInfo.kind`)
KINDS = ("gymnasium", "minatar", "ale", "mujoco", "distrl", "torchrl")


@dataclass(frozen=True)
class EnvInfo:
    """Shapes of one env: ``obs_shape`` (``[F]`` or an image ``[C, H, W]``; ``obs_dim`` its
    element count), and ``num_actions`` for discrete action spaces."""

    obs_dim: int
    num_actions: int | None  # None for continuous actions
    action_dim: int
    #: how a TorchRL env takes discrete actions: "one_hot" (``OneHot``) or "categorical" (indices);
    #: None for a gymnasium id and for continuous actions
    action_encoding: str | None = None
    #: one observation's shape; ``None``: ``(obs_dim,)`` (see :attr:`shape`)
    obs_shape: tuple[int, ...] | None = None
    #: the observations' torch dtype as they travel (float32, or uint8/bool for images); None: float32
    obs_dtype: Any = None
    #: ``K`` when an observation ``[K, H, W]`` is a stack of the last ``K`` frames (Atari: 4), whose
    #: newest frame is ``obs[-1]``; 0 when the channels are not a time stack (MinAtar, flat vectors)
    frame_stack: int = 0
    #: emulator frames per agent step (Atari: 4), for ``frames_per_s``; 1 elsewhere
    frame_skip: int = 1
    #: what the id names (:data:`KINDS`): a plain gymnasium id, ``minatar``, ``ale``, ``mujoco``, one of
    #: distrl's own toy envs (``distrl``) or a TorchRL env factory (``torchrl``)
    kind: str = "gymnasium"
    #: whether ``vecenv`` steps it in the torch-native suite (distrl/envs/torch_envs/) rather than in
    #: gymnasium's vector env on the CPU; every other recipe steps gymnasium's (or the factory's) env
    torch_native: bool = False
    #: whether the observation ends with the env's action mask, ``num_actions`` 0/1 entries (a Dict
    #: observation's or ``info``'s ``action_mask``, folded in by distrl/envs/action_mask.py)
    action_mask: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        """One observation's shape: ``obs_shape``, or ``(obs_dim,)`` for a flat one."""
        return self.obs_shape if self.obs_shape is not None else (self.obs_dim,)


@functools.lru_cache(maxsize=None)
def is_factory(env: str) -> bool:
    """Whether ``--env`` names a TorchRL env factory (``module:function``, distrl/envs/torchrl_env.py)
    rather than a gymnasium id; ``ValueError`` in one line when it names neither.

    A plain id (no ``module:``) is gymnasium's. ``module:NAME`` imports ``module`` (gymnasium's own
    ``make`` does the same for ``module:EnvId``) and decides by what ``NAME`` is there:

    * an attribute that is callable and not a gymnasium ``Env`` class: a factory;
    * otherwise an id the import registered with gymnasium (``MyEnv-v0``, ``ns/MyEnv-v0``): a gymnasium id;
    * neither: the error says so, with the module's close matches.

    The answer depends only on the module's code, so every process (each torchrun rank imports the
    module too: the ids it registers exist only in a process that imported it) decides alike.
    Cached: each process imports the module once."""
    module, sep, name = env.partition(":")
    if not (sep and module):
        return False
    target = import_env_module(env, module)
    attr = functools.reduce(lambda obj, part: getattr(obj, part, None), name.split("."), target)
    env_class = inspect.isclass(attr) and issubclass(attr, gym.Env)
    if callable(attr) and not env_class:
        return True
    if name in gym.registry:
        return False
    if env_class:
        ids = [i for i, spec in gym.registry.items() if spec.entry_point in (attr, f"{module}:{name}")]
        fix = (
            f"name the id it is registered as: --env {module}:{ids[0]}"
            if ids
            else f"register it on import (gymnasium.register(id='{name}-v0', entry_point='{module}:{name}')) "
            f"and name that id: --env {module}:{name}-v0"
        )
        raise ValueError(f"--env {env}: {name!r} is a gymnasium Env class, not an env id; {fix}")
    ids = [i for i in gym.registry if not i.startswith(("ALE/", "MinAtar/"))]
    close = difflib.get_close_matches(name, ids, n=3)
    hint = f"; did you mean {', '.join(f'{module}:{c}' for c in close)}?" if close else ""
    what = (
        f"{module}.{name} is of type {type(attr).__name__}, not a function returning a TorchRL env"
        if attr is not None
        else f"module {module!r} has no {name!r} (a function returning a TorchRL env)"
    )
    raise ValueError(f"--env {env}: {what}, and importing it registers no gymnasium id {name!r}{hint}")


def gym_id(env: str) -> str:
    """The gymnasium id ``env`` names: itself, or for ``module:EnvId`` the ``EnvId`` (the module
    imported by :func:`is_factory`, so the id is registered in this process)."""
    if is_factory(env):
        raise ValueError(f"--env {env} names a TorchRL env factory, not a gymnasium id")
    module, sep, name = env.partition(":")
    return name if sep and module else env


def import_env_module(env: str, module: str):
    """``module`` of ``--env env`` imported; ``ValueError`` in one line if it cannot be (ImportError, or
    the module itself failed on import)."""
    try:
        return importlib.import_module(module)
    except Exception as e:
        raise ValueError(
            f"--env {env}: cannot import module {module!r} ({type(e).__name__}: {first_line(e)})"
        ) from None


def first_line(e: BaseException) -> str:
    """An exception's message in one line, for a one-line error."""
    text = str(e).strip()
    return text.splitlines()[0] if text else "no message"
