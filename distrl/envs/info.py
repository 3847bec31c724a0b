"""What an ``--env`` names, before anything is built: a gymnasium id or a TorchRL env factory
(:func:`is_factory`), and the sizes every role asks of it (:class:`EnvInfo`).

It imports nothing of distrl: ``gym.py`` (gymnasium ids) and ``torchrl_env.py`` (factories) both
build on it, and ``gym.py`` hands a factory to ``torchrl_env.py``, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


def is_factory(env: str) -> bool:
    """Whether ``--env`` names a TorchRL env factory (``module:function``, distrl/envs/torchrl_env.py)
    rather than a gymnasium id. gymnasium ids may carry a module too (``ale_py:ALE/Pong-v5``); the
    part after a factory's colon is a Python name, which an env id (``Name-vN``) is not."""
    module, sep, name = env.partition(":")
    return bool(sep and module) and all(part.isidentifier() for part in name.split("."))
