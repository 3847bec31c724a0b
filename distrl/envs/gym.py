"""gymnasium environments for actors: id validation, vector envs, evaluation.

Actors step ``gymnasium.vector.SyncVectorEnv`` directly rather than TorchRL's ``GymEnv``: on
these CPUs TorchRL's per-step path costs about 300 us a frame against 7 us for the vector env
(a ``Collector`` over one ``GymEnv`` with a random policy gathers 1.7-1.9k frames/s here), and an IMPALA actor is nothing but that loop. ``SAME_STEP`` autoreset returns the
true final observation of a finished episode, which V-trace needs to bootstrap a truncation.
An ``--env`` of the form ``module:function`` is a user's TorchRL env instead: every function here
hands it to ``distrl/envs/torchrl_env.py``.
"""
from __future__ import annotations

import difflib

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from distrl.envs import mock  # noqa: F401  (registers the deterministic test envs)
from distrl.envs.info import EnvInfo, is_factory


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (one line, with close matches) if gymnasium does not know ``env_id``;
    a TorchRL env factory (``module:function``) is resolved and checked instead (torchrl_env.py)."""
    if is_factory(env_id):
        from distrl.envs.torchrl_env import check_factory

        check_factory(env_id)
        return
    try:
        gym.spec(env_id)
    except Exception:
        close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see gymnasium.registry for ids"
        raise ValueError(f"unknown env id {env_id!r}{hint}") from None


def env_info(env_id: str) -> EnvInfo:
    """Observation and action sizes of ``env_id`` (builds one env and closes it), or of a factory's env."""
    if is_factory(env_id):
        from distrl.envs.torchrl_env import check_factory

        return check_factory(env_id)
    env = gym.make(env_id)
    try:
        obs_dim = int(np.prod(env.observation_space.shape))
        space = env.action_space
        if isinstance(space, gym.spaces.Discrete):
            return EnvInfo(obs_dim, int(space.n), 1)
        return EnvInfo(obs_dim, None, int(np.prod(space.shape)))
    finally:
        env.close()


def make_vector_env(env_id: str, num_envs: int, seed: int) -> SyncVectorEnv:
    """``num_envs`` copies of ``env_id`` stepped in this process, reset with seeds ``seed..seed+B-1``;
    a TorchRL env factory's envs behind the same calls (distrl/envs/torchrl_vector.py)."""
    if is_factory(env_id):
        from distrl.envs.torchrl_vector import TorchRLVectorEnv

        return TorchRLVectorEnv(env_id, num_envs, seed)  # seeded by make_env; its first step resets it
    env = SyncVectorEnv([lambda: gym.make(env_id) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


def final_observations(next_obs: np.ndarray, info: dict, done: np.ndarray) -> np.ndarray:
    """``next_obs [B, F]`` with each finished env's row replaced by its true final observation."""
    if not done.any():
        return next_obs
    out = next_obs.copy()
    for i in np.flatnonzero(done):
        out[i] = info["final_obs"][i]
    return out


@torch.no_grad()
def evaluate(policy_logits, env_id: str, episodes: int, seed: int, device: torch.device) -> list[float]:
    """Returns of ``episodes`` greedy episodes, one per env of a vector env.

    Args:
        policy_logits: callable ``obs [B, F] -> logits [B, A]``.
    """
    if is_factory(env_id):  # the user's TorchRL env, made by the same factory as the actors'
        from distrl.envs.torchrl_env import evaluate_factory

        return evaluate_factory(policy_logits, env_id, episodes, seed, device)
    if episodes == 0:
        return []
    env = SyncVectorEnv([lambda: gym.make(env_id) for _ in range(episodes)], autoreset_mode=AutoresetMode.SAME_STEP)
    obs, _ = env.reset(seed=seed)
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    while running.any():
        logits = policy_logits(torch.as_tensor(obs, dtype=torch.float32, device=device))
        obs, reward, term, trunc, _ = env.step(logits.argmax(-1).cpu().numpy())
        returns += reward * running
        running &= ~(term | trunc)
    env.close()
    return returns.tolist()

