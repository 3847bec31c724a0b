"""Atari (``ALE/*`` ids) through ale-py: its C++ vector env for training, gymnasium's wrappers for
evaluation, the same observations from both.

Training envs are ``ale_py.vector_env.AtariVectorEnv``: a C++ thread pool that does the standard
preprocessing itself (frame skip 4 with a max over the last two frames, 84x84 grayscale, a stack of
the last 4 frames, zero-padded at a reset; up to ``noop_max`` no-ops and FIRE at a reset; sticky
actions; reward clipping and episodic life as options, :class:`distrl.config.AtariConfig`). It is
what the actor roles step in place of gymnasium's ``SyncVectorEnv``: the same calls
(``reset(seed=)``, ``step`` with ``SAME_STEP`` autoreset and ``info["final_obs"]``), observations
``uint8 [B, 4, 84, 84]``, so no role needs to know it is Atari.

Evaluation plays one full game per env (every life, unclipped score) through
:func:`make_atari_env`: ``gym.make(id, frameskip=1)`` + ``AtariPreprocessing`` +
``FrameStackObservation`` padded with zeros. With ``noop_max=0`` both paths give the same
observations for the same seed, frame for frame (``tests/test_atari.py``); the no-op counts come
from different random streams, so with no-ops the episodes differ from their first step.
"""

from __future__ import annotations

from typing import Optional

import gymnasium as gym
import numpy as np

from distrl.config import AtariConfig

PREFIX = "ALE/"
FRAME_SKIP = 4  #: emulator frames per agent step
FRAME_STACK = 4  #: frames in one observation
SIZE = 84  #: observation side (grayscale)


def is_atari(env_id: str) -> bool:
    """An ale-py id (``ALE/Pong-v5``)."""
    return env_id.startswith(PREFIX)


def frame_skip(env_id: str) -> int:
    """Emulator frames per agent step of ``env_id``: :data:`FRAME_SKIP` for Atari, else 1."""
    return FRAME_SKIP if is_atari(env_id) else 1


def eval_epsilon(env_id: str, opts: Optional[AtariConfig] = None) -> float:
    """The exploration of an evaluation episode: ``opts.eval_epsilon`` for Atari (Mnih et al.
    2015 evaluate with 0.05), 0 (greedy) elsewhere."""
    return (opts or AtariConfig()).eval_epsilon if is_atari(env_id) else 0.0


def _game(env_id: str) -> str:
    """``ALE/Pong-v5`` -> ``pong``; ``ALE/MontezumaRevenge-v5`` -> ``montezuma_revenge`` (ale-py's ROM names)."""
    name = env_id[len(PREFIX) :].split("-")[0]
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))


def _register() -> None:
    import ale_py

    gym.register_envs(ale_py)


def check_installed(env_id: str) -> None:
    """Raise ``ValueError`` in one line if ale-py is missing."""
    try:
        import ale_py  # noqa: F401
        import cv2  # noqa: F401  (gymnasium's AtariPreprocessing resizes with it)
    except ImportError:
        raise ValueError(
            f'{env_id} needs ale-py and opencv: pip install -e ".[atari]" in the distrl checkout'
        ) from None
    _register()


def make_atari_vector_env(env_id: str, num_envs: int, seed: int, opts: Optional[AtariConfig] = None):
    """``num_envs`` training envs of ``env_id`` in ale-py's C++ vector env, reset with seed ``seed``
    (env ``i`` plays from ``seed + i``). Observations ``uint8 [num_envs, 4, 84, 84]``."""
    from ale_py.vector_env import AtariVectorEnv

    check_installed(env_id)
    opts = opts or AtariConfig()
    env = AtariVectorEnv(
        game=_game(env_id),
        num_envs=num_envs,
        num_threads=min(opts.threads, num_envs),
        frameskip=FRAME_SKIP,
        stack_num=FRAME_STACK,
        img_height=SIZE,
        img_width=SIZE,
        grayscale=True,
        maxpool=True,
        noop_max=opts.noop_max,
        use_fire_reset=True,
        episodic_life=opts.episodic_life,
        reward_clipping=opts.reward_clipping,
        repeat_action_probability=opts.sticky_actions,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    env.reset(seed=seed)
    return env


class FireReset(gym.Wrapper):
    """Press FIRE for one emulator frame after a reset in games that wait for it (Breakout, Pong),
    as ale-py's vector env does with ``use_fire_reset``; gymnasium's wrappers have no such step."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        if "FIRE" in self.env.unwrapped.get_action_meanings():
            obs, _, term, trunc, info = self.env.step(1)
            if term or trunc:
                obs, info = self.env.reset(**kwargs)
        return obs, info


def make_atari_env(env_id: str, opts: Optional[AtariConfig] = None, render_mode: Optional[str] = None) -> gym.Env:
    """One evaluation env: the full game (every life, unclipped score), observations
    ``uint8 [4, 84, 84]`` as the vector env makes them (newest frame last, zeros before the first);
    ``render_mode="rgb_array"`` renders the emulator's screen (``[210, 160, 3]``) for a video."""
    check_installed(env_id)
    opts = opts or AtariConfig()
    env = gym.make(
        env_id,
        frameskip=1,
        repeat_action_probability=opts.sticky_actions,
        max_num_frames_per_episode=108_000,
        render_mode=render_mode,
    )
    env = FireReset(env)  # below the frame skip: one emulator frame of FIRE, as the vector env
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=opts.noop_max,
        frame_skip=FRAME_SKIP,
        screen_size=SIZE,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )
    return gym.wrappers.FrameStackObservation(env, FRAME_STACK, padding_type=np.zeros((SIZE, SIZE), np.uint8))
