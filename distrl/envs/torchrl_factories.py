"""Example TorchRL env factories for ``--env module:function`` (docs/torchrl.md).

Each returns a TorchRL env with a transform, as a user's factory would. The first form is the
plain one (one ``GymEnv``; distrl batches it in a ``SerialEnv``); the second batches itself with a
gymnasium vector env inside ``GymWrapper``, TorchRL's fast layout on CPU. ``match_sign_pixels``
(a uint8 image, channels last) and ``pendulum`` (a ``Box`` action) show the other observations and
actions a factory may have.
"""

from __future__ import annotations

from torchrl.envs import EnvBase, GymEnv, GymWrapper, StepCounter, TransformedEnv


def cartpole_with_stepcounter() -> EnvBase:
    """CartPole-v1 as a TorchRL ``GymEnv`` behind a ``StepCounter`` transform (``batch_size []``)."""
    return TransformedEnv(GymEnv("CartPole-v1"), StepCounter())


def cartpole_vector_with_stepcounter(num_envs: int) -> EnvBase:
    """``num_envs`` CartPole-v1 in one gymnasium ``SyncVectorEnv`` inside ``GymWrapper``, behind a
    ``StepCounter`` (``batch_size [num_envs]``)."""
    return _vector_with_stepcounter("CartPole-v1", num_envs)


def _vector_with_stepcounter(env_id: str, num_envs: int) -> EnvBase:
    """``SAME_STEP`` autoreset is what ``GymWrapper`` reads correctly (it refuses ``NEXT_STEP``);
    index actions (``categorical_action_encoding``) skip a one-hot per step."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    vec = SyncVectorEnv([lambda: gym.make(env_id) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
    return TransformedEnv(GymWrapper(vec, categorical_action_encoding=True), StepCounter())


def match_sign_with_stepcounter() -> EnvBase:
    """distrl's toy env (``distrl/MatchSign-v0``, learns in seconds) as a ``GymEnv`` behind a
    ``StepCounter``: the tests' factory."""
    import distrl.envs.mock  # noqa: F401  (registers the id)

    return TransformedEnv(GymEnv("distrl/MatchSign-v0"), StepCounter())


def match_sign_vector_with_stepcounter(num_envs: int) -> EnvBase:
    """The toy env batched by the factory (``batch_size [num_envs]``): the tests' learning runs."""
    import distrl.envs.mock  # noqa: F401  (registers the id)

    return _vector_with_stepcounter("distrl/MatchSign-v0", num_envs)


def match_sign_pixels() -> EnvBase:
    """The toy env seen as an image: ``pixels``, ``uint8 [6, 6, 1]`` (channels last, as TorchRL's
    ``GymEnv`` gives a gymnasium image), all 255 for +1 and 0 for -1; distrl reads it as ``[1, 6, 6]``."""
    import gymnasium as gym
    import numpy as np

    import distrl.envs.mock  # noqa: F401  (registers the id)

    image = gym.spaces.Box(0, 255, (6, 6, 1), np.uint8)
    env = gym.wrappers.TransformObservation(
        gym.make("distrl/MatchSign-v0"), lambda o: np.full(image.shape, 255 * (o[0] > 0), np.uint8), image
    )
    return TransformedEnv(GymWrapper(env), StepCounter())


def pendulum() -> EnvBase:
    """Pendulum-v1: a flat observation and a ``Box(-2, 2, (1,))`` action (the Gaussian head)."""
    return TransformedEnv(GymEnv("Pendulum-v1"), StepCounter())
