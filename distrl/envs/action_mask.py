"""Action masks from the env: which of ``A`` discrete actions are legal in the current state.

The env contract (gymnasium's, as PettingZoo, Minigrid and most board-game envs write it): a
``Discrete(A)`` env gives a boolean (or 0/1) ``action_mask [A]``, ``True`` where an action is legal,
either

* in a ``Dict`` observation ``{"observation": Box, "action_mask": MultiBinary(A) or Box}``, or
* in ``info["action_mask"]`` of every ``reset`` and ``step``, beside a plain ``Box`` observation.

:func:`wrap_action_mask` turns either into one flat float32 observation ``[F + A]``: the observation
flattened, then the mask as 0/1. So the mask travels wherever an observation travels (every
recipe's trajectory, Sample Factory's shared slots, Ape-X's replay and its bootstrap observation,
checkpoints' evaluation) with no key or buffer of its own, and the network reads it back from the
observation's last ``A`` entries (:mod:`distrl.nn.action_mask`). The network sees the mask as input
too, which only helps it. An env without a mask is returned as it was: no cost anywhere.

Images cannot carry a flat mask beside them: a masked env must have a vector (or a small
array, flattened) observation; an image one is refused in one line.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from distrl.data import keys

#: the observation key of a Dict observation that holds the rest of the state
DICT_OBSERVATION = keys.OBSERVATION


def _flat_box(space: gym.Space, env_id: str) -> gym.spaces.Box:
    """``space`` (the observation beside a mask) as a flat float32 Box, or a one-line ``ValueError``."""
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"{env_id}: an action-masked env needs a Box observation beside its mask, got {space}")
    if len(space.shape) == 3 and space.dtype in (np.uint8, np.bool_):
        raise ValueError(
            f"{env_id}: action masks need a flat observation; an image {space.shape} cannot carry its mask beside "
            "it (flatten the observation in the env, or drop the mask)"
        )
    return space


class MaskedObservation(gym.ObservationWrapper):
    """``obs -> cat(flatten(obs) as float32, mask as 0/1) [F + A]``; ``source`` is ``"obs"`` (a Dict
    observation) or ``"info"`` (``info["action_mask"]``)."""

    def __init__(self, env: gym.Env, source: str, env_id: str = ""):
        super().__init__(env)
        self.source, self.num_actions = source, int(env.action_space.n)
        inner = env.observation_space[DICT_OBSERVATION] if source == "obs" else env.observation_space
        box = _flat_box(inner, env_id or str(env.spec.id if env.spec else env))
        bound = lambda x, fill: np.concatenate(  # noqa: E731
            [np.broadcast_to(x, box.shape).ravel(), np.full(self.num_actions, fill)]
        ).astype(np.float32)
        self.observation_space = gym.spaces.Box(bound(box.low, 0.0), bound(box.high, 1.0), dtype=np.float32)
        self._info_mask: np.ndarray | None = None

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._info_mask = info.get(keys.ACTION_MASK)
        return self.observation(obs), info

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        self._info_mask = info.get(keys.ACTION_MASK)
        return self.observation(obs), reward, term, trunc, info

    def observation(self, obs) -> np.ndarray:
        if self.source == "obs":
            obs, mask = obs[DICT_OBSERVATION], obs[keys.ACTION_MASK]
        else:
            mask = self._info_mask
            if mask is None:
                raise ValueError("the env gave info['action_mask'] at its first reset but not at this step")
        mask = np.asarray(mask).reshape(-1)
        if mask.shape[0] != self.num_actions:
            raise ValueError(f"action_mask has {mask.shape[0]} entries for {self.num_actions} actions")
        return np.concatenate([np.asarray(obs, np.float32).reshape(-1), mask.astype(np.float32)])


def mask_source(env: gym.Env, env_id: str) -> str | None:
    """Where ``env`` gives its action mask: ``"obs"`` (a Dict observation with ``action_mask``),
    ``"info"`` (``info["action_mask"]`` at reset), or ``None`` (no mask, or not a Discrete env).
    The info check resets one env once per process and id (:func:`_mask_in_info`)."""
    if not isinstance(env.action_space, gym.spaces.Discrete):
        return None
    space = env.observation_space
    if isinstance(space, gym.spaces.Dict):
        if keys.ACTION_MASK not in space.spaces:
            return None
        if set(space.spaces) != {DICT_OBSERVATION, keys.ACTION_MASK}:  # nothing dropped unseen
            raise ValueError(
                f"{env_id}: a Dict observation with an action_mask needs its state under 'observation' and "
                f"nothing else, got keys {list(space.spaces)} (concatenate the rest into 'observation')"
            )
        return "obs"
    if isinstance(space, gym.spaces.Box) and not (len(space.shape) == 3 and space.dtype in (np.uint8, np.bool_)):
        return "info" if _mask_in_info(env_id, env) else None
    return None


_INFO_MASK: dict[str, bool] = {}


def _mask_in_info(env_id: str, env: gym.Env) -> bool:
    """Whether ``env``'s reset info holds ``action_mask``: one unseeded reset of the first env built
    for ``env_id`` in this process (every caller resets again with its seed before stepping)."""
    if env_id not in _INFO_MASK:
        _INFO_MASK[env_id] = keys.ACTION_MASK in env.reset()[1]
    return _INFO_MASK[env_id]


def wrap_action_mask(env: gym.Env, env_id: str) -> gym.Env:
    """``env`` with its action mask folded into a flat observation (:class:`MaskedObservation`), or
    ``env`` itself when it has none."""
    source = mask_source(env, env_id)
    return env if source is None else MaskedObservation(env, source, env_id)


def action_masked(env: gym.Env) -> bool:
    """Whether :func:`wrap_action_mask` folded a mask into ``env``'s observation (its last ``A`` entries)."""
    return isinstance(env, MaskedObservation)
