"""gymnasium environments for actors: id validation, vector envs, evaluation.

Actors step ``gymnasium.vector.SyncVectorEnv`` directly rather than TorchRL's ``GymEnv``: on
these CPUs TorchRL's per-step path costs about 300 us a frame against 7 us for the vector env
(a ``Collector`` over one ``GymEnv`` with a random policy gathers 1.7-1.9k frames/s here), and an IMPALA actor is
nothing but that loop. ``SAME_STEP`` autoreset returns the
true final observation of a finished episode, which V-trace needs to bootstrap a truncation.
An ``--env`` of the form ``module:function`` is a user's TorchRL env instead: every function here
hands it to ``distrl/envs/torchrl_env.py``. gymnasium's own ``module:EnvId`` (the module registers
the id on import) is a gymnasium id like any other: :func:`~distrl.envs.info.is_factory` tells the
two apart and imports the module, :func:`~distrl.envs.info.gym_id` gives the bare id.

Every env is built by :func:`make_env`, the boundary where images change layout once: an
observation ``[H, W, C]`` of uint8 or bool becomes ``[C, H, W]`` in its own dtype, and stays so on
every path to the network (the encoder makes it float). ``MinAtar/*`` ids come from the
``minatar`` package (an optional extra), registered on first use, with a time limit.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from pathlib import Path
from typing import Callable, Optional

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from distrl.envs import atari, video
from distrl.envs import mock  # noqa: F401  (registers the deterministic test envs)
from distrl.envs.action_mask import action_masked, wrap_action_mask
from distrl.envs.info import EnvInfo, gym_id, is_factory

#: MinAtar's time limit in steps. The package sets none: a good Breakout policy can keep the ball
#: alive for ever, and training and evaluation need episodes that end. The torch versions default
#: to the same (``distrl.envs.torch_envs``).
MINATAR_MAX_EPISODE_STEPS = 10_000


def _register_minatar(env_id: str) -> None:
    """Register the ``minatar`` package's gymnasium ids on first use, or say in one line what to install."""
    if not env_id.startswith("MinAtar/") or env_id in gym.registry:
        return
    try:
        from minatar.gym import register_envs
    except ImportError:
        raise ValueError(
            f'{env_id} needs the minatar package: pip install -e ".[minatar]" in the distrl checkout'
        ) from None
    register_envs()


def is_image(space: gym.Space) -> bool:
    """An image observation ``[H, W, C]`` of uint8 or bool (what :func:`make_env` turns to ``[C, H, W]``)."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype in (np.uint8, np.bool_)


def make_env(
    env_id: str, atari_opts=None, render_mode: Optional[str] = None, minatar_sticky: Optional[float] = None
) -> gym.Env:
    """``gym.make(env_id)``, with images channels-first (``[C, H, W]``, dtype unchanged) and MinAtar's
    time limit (:data:`MINATAR_MAX_EPISODE_STEPS`); an ``ALE/*`` id is the full, preprocessed game
    (``atari.make_atari_env``, options ``atari_opts``: a :class:`distrl.config.AtariConfig`).
    ``render_mode`` is gymnasium's (``"rgb_array"`` for a video, :mod:`distrl.envs.video`);
    ``minatar_sticky`` a MinAtar game's ``sticky_action_prob`` (None: the package's 0.1). A
    ``module:EnvId`` is made as ``EnvId`` once the module is imported."""
    env_id = gym_id(env_id)
    if atari.is_atari(env_id):
        return atari.make_atari_env(env_id, atari_opts, render_mode)
    _register_minatar(env_id)
    kwargs = {"max_episode_steps": MINATAR_MAX_EPISODE_STEPS} if env_id.startswith("MinAtar/") else {}
    if minatar_sticky is not None:
        kwargs["sticky_action_prob"] = minatar_sticky
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = gym.make(env_id, **kwargs)
    space = env.observation_space
    if is_image(space):
        h, w, c = space.shape
        chw = gym.spaces.Box(np.moveaxis(space.low, -1, 0), np.moveaxis(space.high, -1, 0), (c, h, w), space.dtype)
        # a contiguous copy: a strided view would be copied again by every buffer it lands in
        env = gym.wrappers.TransformObservation(env, lambda o: np.ascontiguousarray(np.moveaxis(o, -1, 0)), chw)
    return wrap_action_mask(env, env_id)  # an action mask becomes the observation's last A entries


def as_obs(obs: np.ndarray) -> torch.Tensor:
    """A batch of observations as a tensor: floats as float32 (the networks' dtype), images
    (uint8, bool) in their own dtype: they become float inside the network."""
    t = torch.as_tensor(obs)
    return t.float() if t.is_floating_point() and t.dtype != torch.float32 else t


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (one line, with close matches) if gymnasium does not know ``env_id``;
    a TorchRL env factory (``module:function``) is resolved and checked instead (torchrl_env.py)."""
    if is_factory(env_id):
        from distrl.envs.torchrl_env import check_factory

        check_factory(env_id)
        return
    env_id = gym_id(env_id)  # a module:EnvId's module is imported: its ids are registered
    _register_minatar(env_id)
    if atari.is_atari(env_id):
        atari.check_installed(env_id)
    try:
        gym.spec(env_id)
    except Exception:
        close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see gymnasium.registry for ids"
        raise ValueError(f"unknown env id {env_id!r}{hint}") from None


def env_kind(env_id: str) -> str:
    """What ``env_id`` names, one of :data:`~distrl.envs.info.KINDS` (a gymnasium id must be registered)."""
    if is_factory(env_id):
        return "torchrl"
    env_id = gym_id(env_id)
    if atari.is_atari(env_id):
        return "ale"
    if env_id.startswith("MinAtar/"):
        return "minatar"
    if env_id.startswith("distrl/"):
        return "distrl"
    entry = gym.spec(env_id).entry_point
    return (
        "mujoco" if "mujoco" in (entry if isinstance(entry, str) else getattr(entry, "__module__", "")) else "gymnasium"
    )


@functools.lru_cache(maxsize=None)
def env_info(env_id: str) -> EnvInfo:
    """What ``--env`` names, resolved once per process (the plan asks first; every role of the process then
    gets the same description through ``RoleContext.env``): kind, observation and action sizes, the backend
    vecenv steps it in. Builds one env and closes it, or checks a factory's env."""
    from distrl.envs.torch_envs import TORCH_ENV_IDS

    kind = env_kind(env_id)
    return dataclasses.replace(_spaces(env_id), kind=kind, torch_native=kind != "ale" and env_id in TORCH_ENV_IDS)


def _spaces(env_id: str) -> EnvInfo:
    """Observation and action sizes of ``env_id`` (builds one env and closes it), or of a factory's env."""
    if is_factory(env_id):
        from distrl.envs.torchrl_env import check_factory

        return check_factory(env_id)
    env = make_env(env_id)
    try:
        obs = env.observation_space
        shape, dtype = tuple(int(d) for d in obs.shape), as_obs(np.zeros((1,), obs.dtype)).dtype
        obs_dim = int(np.prod(shape))
        space = env.action_space
        if atari.is_atari(env_id):
            return EnvInfo(
                obs_dim,
                int(space.n),
                1,
                obs_shape=shape,
                obs_dtype=dtype,
                frame_stack=atari.FRAME_STACK,
                frame_skip=atari.FRAME_SKIP,
            )
        if isinstance(space, gym.spaces.Discrete):
            return EnvInfo(obs_dim, int(space.n), 1, obs_shape=shape, obs_dtype=dtype, action_mask=action_masked(env))
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
            raise ValueError(f"{env_id}: distrl trains on a Discrete action space or a flat Box; this one is {space}")
        return EnvInfo(obs_dim, None, int(np.prod(space.shape)), obs_shape=shape, obs_dtype=dtype)
    finally:
        env.close()


def make_vector_env(env_id: str, num_envs: int, seed: int, atari_opts=None) -> SyncVectorEnv:
    """``num_envs`` copies of ``env_id`` stepped in this process, reset with seeds ``seed..seed+B-1``;
    a TorchRL env factory's envs behind the same calls (distrl/envs/torchrl_vector.py); an ``ALE/*``
    id in ale-py's C++ vector env (``atari.make_atari_vector_env``, options ``atari_opts``)."""
    if atari.is_atari(env_id):
        return atari.make_atari_vector_env(env_id, num_envs, seed, atari_opts)
    if is_factory(env_id):
        from distrl.envs.torchrl_vector import TorchRLVectorEnv

        return TorchRLVectorEnv(env_id, num_envs, seed)  # seeded by make_env; its first step resets it
    env = SyncVectorEnv([lambda: make_env(env_id) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
    if isinstance(env.single_action_space, gym.spaces.Box):
        # Gaussian actions are clipped to the box here, at the env (distrl/nn/heads.py): the learner's
        # log-probability is that of the unclipped sample the policy drew
        env = gym.wrappers.vector.ClipAction(env)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


def final_observations(next_obs: np.ndarray, info: dict, done: np.ndarray) -> np.ndarray:
    """``next_obs [B, *F]`` with each finished env's row replaced by its true final observation."""
    if not done.any():
        return next_obs
    out = next_obs.copy()
    for i in np.flatnonzero(done):
        out[i] = info["final_obs"][i]
    return out


@torch.no_grad()
def evaluate(
    policy_logits, env_id: str, episodes: int, seed: int, device: torch.device, atari_opts=None, head=None
) -> list[float]:
    """Returns of ``episodes`` greedy episodes, one per env of a vector env (Atari: full games,
    every life, unclipped scores, epsilon-greedy at ``atari.eval_epsilon``): :func:`play_episodes`.

    Args:
        policy_logits: callable ``obs [B, *F] -> logits [B, A]`` (observations as :func:`as_obs` gives them),
            or the output a ``head`` (:mod:`distrl.nn.heads`) reads: its ``greedy`` picks the action
            (a Gaussian's mean, clipped to the action box as in training); no head: argmax.
    """
    if is_factory(env_id):  # the user's TorchRL env, made by the same factory as the actors'
        from distrl.envs.torchrl_env import evaluate_factory

        return evaluate_factory(policy_logits, env_id, episodes, seed, device, head)

    def act(obs: torch.Tensor) -> torch.Tensor:
        logits = policy_logits(obs.to(device))
        return logits.argmax(-1) if head is None else head.greedy(logits)

    return play_episodes(act, env_id, episodes, seed, atari_opts, atari.eval_epsilon(env_id, atari_opts)).returns


@dataclasses.dataclass
class Episodes:
    """What :func:`play_episodes` played: episode ``i`` reset with seed ``seeds[i]``."""

    returns: list[float]
    lengths: list[int]
    seeds: list[int]


def random_actions(rng: np.random.Generator, obs: np.ndarray, n: int, masked: bool) -> np.ndarray:
    """Uniformly random actions ``[B]`` of ``n``; in an action-masked env among each row's legal ones
    (``obs [B, F + n]``'s last ``n`` entries, distrl/envs/action_mask.py), never an illegal one."""
    if not masked:
        return rng.integers(n, size=obs.shape[0])
    legal = obs[:, -n:] > 0.5
    legal |= ~legal.any(-1, keepdims=True)
    return np.where(legal, rng.random(legal.shape), -1.0).argmax(-1)


@torch.no_grad()
def play_episodes(
    act: Callable[[torch.Tensor], torch.Tensor],
    env_id: str,
    episodes: int,
    seed: int,
    atari_opts=None,
    epsilon: float = 0.0,
    *,
    video_dir: Optional[Path] = None,
    videos: int = 0,
    on_step: Optional[Callable[[int, int], None]] = None,
    max_steps: Optional[int] = None,
    minatar_sticky: Optional[float] = None,
) -> Episodes:
    """The first episode of each of ``episodes`` envs of ``env_id`` (:func:`make_env`), env ``i`` reset
    with seed ``seed + i``, stepped together in one ``SyncVectorEnv``: every distrl evaluation.

    Args:
        act: ``obs [B, *F] -> action [B]`` (indices) or ``[B, A]`` (a box's, clipped to it here), a tensor
            on any device; observations as :func:`as_obs` gives them.
        epsilon: probability of a uniformly random action instead, per env and step (discrete actions;
            drawn from ``numpy.random.default_rng(seed)``).
        video_dir: where the first ``videos`` episodes are written, ``episode-000.mp4`` on
            (:class:`distrl.envs.video.RecordEpisode`).
        on_step: called after every vector step with ``(episodes finished, vector steps)``.
        max_steps: an episode ends after this many steps if the env has not ended it (a shorter
            time limit than the env's: gymnax's MinAtar, say, cut episodes at 1,000 steps).
        minatar_sticky: a MinAtar game's sticky-action probability (:func:`make_env`).
    """
    if episodes == 0:
        return Episodes([], [], [])

    def env_fn(i: int) -> Callable[[], gym.Env]:
        if video_dir is None or i >= videos:
            return lambda: make_env(env_id, atari_opts, minatar_sticky=minatar_sticky)

        def recorded() -> gym.Env:
            env = make_env(env_id, atari_opts, video.render_mode(env_id), minatar_sticky)
            fps = env.metadata.get("render_fps") if env.render_mode else None
            if atari.is_atari(env_id):  # real time: the emulator's 60 frames a second, one in FRAME_SKIP kept
                fps = 60.0 / atari.FRAME_SKIP  # (ale-py's metadata says 30)
            fps = fps or video.DEFAULT_FPS
            return video.RecordEpisode(env, Path(video_dir) / f"episode-{i:03d}.mp4", fps)

        return recorded

    env = SyncVectorEnv([env_fn(i) for i in range(episodes)], autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        if isinstance(env.single_action_space, gym.spaces.Box):
            env = gym.wrappers.vector.ClipAction(env)
        obs, _ = env.reset(seed=seed)
        returns, lengths = np.zeros(episodes), np.zeros(episodes, dtype=np.int64)
        running = np.ones(episodes, dtype=bool)
        rng = np.random.default_rng(seed)
        steps, masked = 0, epsilon > 0 and env_info(env_id).action_mask
        while running.any():
            action = act(as_obs(obs)).cpu().numpy()
            if epsilon:  # Atari: a greedy policy that never presses FIRE would wait out the 27k-step limit
                explore = rng.random(episodes) < epsilon
                action = np.where(explore, random_actions(rng, obs, env.single_action_space.n, masked), action)
            obs, reward, term, trunc, _ = env.step(action)
            returns += reward * running
            lengths += running
            running &= ~(term | trunc)
            if max_steps is not None:
                running &= lengths < max_steps
            steps += 1
            if on_step is not None:
                on_step(int((~running).sum()), steps)
    finally:
        env.close()
    return Episodes(returns.tolist(), lengths.tolist(), [seed + i for i in range(episodes)])
