"""A user's TorchRL env, named on the command line as ``--env module:function``.

The function (the *factory*) returns a TorchRL ``EnvBase``, transforms included. Two forms:

* ``fn() -> EnvBase`` with ``batch_size []`` (e.g. ``TransformedEnv(GymEnv(...), StepCounter())``):
  distrl steps ``B`` copies of it in a ``SerialEnv``;
* ``fn(num_envs) -> EnvBase`` with ``batch_size [num_envs]``: the factory batches itself (a
  gymnasium vector env inside ``GymWrapper`` is TorchRL's fast layout on CPU).

:func:`check_factory` runs before any process group starts (from ``plan``): it resolves the
path, builds the env, runs TorchRL's ``check_env_specs`` on it and checks that distrl can train
on it. Every failure is one ``ValueError`` line. What distrl takes:

* observations under ``observation`` (else ``pixels``, TorchRL's key for images): a flat float vector
  ``[*B, F]``, or an image of uint8, bool or float, channels first ``[*B, C, H, W]`` or last
  ``[*B, H, W, C]`` (the smaller of the first and last sides is the channels; a tie reads as first);
* one discrete action (``Categorical`` indices or ``OneHot``) or a flat continuous one (a box
  ``[*B, A]``, bounded or not).

:func:`make_env` puts the env in the form the gymnasium path gives every role (distrl/envs/gym.py):
the observation renamed to ``observation``, an image channels first in its own dtype (a
``PermuteTransform``: uint8 stays uint8 until the network), and a bounded box's actions clipped
to it at the env (:class:`ClipAction`), so the policy's unclipped sample is what a trajectory
keeps, as gymnasium's ``ClipAction`` does for a gymnasium id.
"""

from __future__ import annotations

import functools
import inspect
import logging
import warnings
from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot, TensorSpec
from torchrl.envs import Compose, EnvBase, PermuteTransform, RenameTransform, SerialEnv, Transform, TransformedEnv

from distrl.data import keys
from distrl.envs.info import EnvInfo, first_line, import_env_module

EnvFactory = Callable[..., EnvBase]

#: TorchRL's key for image observations (``GymEnv`` of a pixel env, ``from_pixels=True``): read as
#: the observation when an env has no ``observation``
PIXELS = "pixels"


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
    fn = import_env_module(spec, module)
    for part in name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ValueError(f"--env {spec}: module {module!r} has no {name!r}")
    if not callable(fn):
        raise ValueError(f"--env {spec}: {name!r} is not callable")
    return fn


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
        env = _as_distrl_sees_it(env)
        env.set_seed(seed)
    return env


class ClipAction(Transform):
    """Clips ``action`` to ``[low, high]`` on its way into the env (an inverse transform), leaving the
    policy's sample as it was in the TensorDict that a collector keeps. Why not TorchRL's
    ``ClipTransform``: it takes scalar bounds only, and a box has one per dimension."""

    def __init__(self, low: torch.Tensor, high: torch.Tensor):
        super().__init__(in_keys_inv=[keys.ACTION], out_keys_inv=[keys.ACTION])
        self.register_buffer("low", low.clone())
        self.register_buffer("high", high.clone())

    def _inv_apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum(action, self.low), self.high)


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether an image observation of ``shape`` (3 dims) is ``[H, W, C]``: its last side is smaller
    than its first (a channel count is a handful, an image side more; a tie reads as ``[C, H, W]``)."""
    return len(shape) == 3 and shape[-1] < shape[0]


def _obs_key(env: EnvBase) -> str | None:
    names = env.observation_spec.keys()
    return keys.OBSERVATION if keys.OBSERVATION in names else PIXELS if PIXELS in names else None


def _as_distrl_sees_it(env: EnvBase) -> EnvBase:
    """``env`` behind the transforms that give it the gymnasium path's form (module docstring):
    ``pixels`` renamed to ``observation``, a channels-last image permuted to ``[C, H, W]``, a bounded
    box's actions clipped; ``env`` itself when it needs none."""
    batch, key = len(env.batch_size), _obs_key(env)
    transforms: list[Transform] = []
    if key == PIXELS:
        transforms.append(RenameTransform([PIXELS], [keys.OBSERVATION]))
    if channels_last(tuple(env.observation_spec[key].shape[batch:])):
        transforms.append(PermuteTransform((-1, -3, -2), in_keys=[keys.OBSERVATION]))
    action = env.action_spec
    if isinstance(action, Bounded) and action.dtype.is_floating_point:
        transforms.append(ClipAction(action.space.low, action.space.high))
    return TransformedEnv(env, Compose(*transforms)) if transforms else env


def as_obs(obs: torch.Tensor) -> torch.Tensor:
    """Observations as they travel: floats as float32, images of uint8 or bool in their own dtype
    (as :func:`distrl.envs.gym.as_obs` gives a gymnasium id's)."""
    return obs.float() if obs.is_floating_point() and obs.dtype != torch.float32 else obs


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
            raise ValueError(f"--env {spec}: the factory raised {type(e).__name__}: {first_line(e)}") from None
        if not isinstance(env, EnvBase):
            raise ValueError(f"--env {spec}: the factory returned {type(env).__name__}, not a TorchRL EnvBase")
        try:
            try:
                check_env_specs(env, seed=0)
            except Exception as e:
                raise ValueError(
                    f"--env {spec}: torchrl check_env_specs failed: {type(e).__name__}: {first_line(e)}"
                ) from None
            return _info(spec, env)
        finally:
            if not env.is_closed:
                env.close()


@functools.lru_cache(maxsize=None)
def action_box(spec: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low [A], high [A])`` of factory ``spec``'s bounded box of actions (builds one env and closes
    it); ``ValueError`` in one line for an unbounded one. What apex's SAC squashes its actions into."""
    fn = load_factory(spec)
    with quiet_torchrl():
        env = fn(num_envs=1) if _takes_num_envs(fn) else fn()
        try:
            action = env.action_spec
            if not (isinstance(action, Bounded) and action.dtype.is_floating_point):
                raise ValueError(
                    f"--env {spec}: apex's SAC learner squashes its actions into a bounded box; this env's action "
                    f"spec is {type(action).__name__} (give it bounds, or train it with impala, seed, sf or a3c)"
                )
            low, high = (b.reshape(-1, b.shape[-1])[0].to(torch.float32) for b in (action.space.low, action.space.high))
            return low.clone(), high.clone()
        finally:
            if not env.is_closed:
                env.close()


def _info(spec: str, env: EnvBase) -> EnvInfo:
    """Sizes of a checked env as distrl sees it (:func:`make_env`'s form: ``obs_shape`` channels
    first), or ``ValueError`` naming what distrl cannot train on."""
    batch, key = len(env.batch_size), _obs_key(env)
    if keys.ACTION_MASK in env.observation_spec.keys():  # silently ignored, its agent would play illegal moves
        raise ValueError(
            f"--env {spec}: distrl reads action masks from gymnasium envs (a Dict observation or info), not from a "
            "TorchRL env's action_mask: give the gymnasium id (docs/action-masks.md)"
        )
    if key is None:
        raise ValueError(
            f"--env {spec}: the env has no {keys.OBSERVATION!r} nor {PIXELS!r} (it has "
            f"{sorted(map(str, env.observation_spec.keys()))}); rename or concatenate into it with a "
            "transform (RenameTransform, CatTensors)"
        )
    obs = env.observation_spec[key]
    shape, dtype = tuple(int(d) for d in obs.shape[batch:]), obs.dtype
    flat = len(shape) == 1 and dtype.is_floating_point
    image = len(shape) == 3 and (dtype in (torch.uint8, torch.bool) or dtype.is_floating_point)
    if not (flat or image):
        raise ValueError(
            f"--env {spec}: distrl trains on a flat float observation [F] or an image (uint8, bool or float; "
            f"[C, H, W] or [H, W, C]); this one ({key!r}) is {list(shape)} {dtype} (flatten or reshape it "
            "with a transform: FlattenObservation, DoubleToFloat)"
        )
    if channels_last(shape):
        shape = (shape[2], shape[0], shape[1])
    sizes = dict(obs_shape=shape, obs_dtype=torch.float32 if dtype.is_floating_point else dtype)
    obs_dim = int(torch.Size(shape).numel())
    action = env.action_spec
    single = isinstance(action, (Categorical, OneHot)) and not isinstance(action, (MultiCategorical, MultiOneHot))
    if single and action.shape[batch:] in ((), (action.space.n,)):
        return EnvInfo(obs_dim, int(action.space.n), 1, action_encoding(action), **sizes)
    if action.dtype.is_floating_point and len(action.shape[batch:]) == 1:
        return EnvInfo(obs_dim, None, int(action.shape[-1]), **sizes)
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
    policy_logits, spec: str, episodes: int, seed: int, device: torch.device, head=None, max_steps: int = 100_000
) -> list[float]:
    """Greedy returns of ``episodes`` episodes of factory ``spec``: the first episode of each env of
    :func:`make_env` ``(spec, episodes, seed)``, so the same every time for the same seed.

    Args:
        policy_logits: callable ``obs [B, *F] -> logits [B, A]`` (observations as :func:`as_obs` gives
            them), or the output a ``head`` (:mod:`distrl.nn.heads`) reads: its ``greedy`` picks the
            action (a Gaussian's mean, clipped to a bounded box by the env); no head: argmax.
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
                out = policy_logits(as_obs(td.get(keys.OBSERVATION)).to(device))
                action = (out.argmax(-1) if head is None else head.greedy(out)).cpu()
                td.set(keys.ACTION, torch.nn.functional.one_hot(action, n) if one_hot else action)
                out, td = env.step_and_maybe_reset(td)
                returns += out.get(keys.REWARD).reshape(episodes).float() * running
                running &= ~out.get(keys.DONE).reshape(episodes)
                if not running.any():
                    break
    finally:
        env.close()
    return returns.tolist()
