"""TorchRL's collector layouts, built once for every benchmark: the env layouts a knowledgeable
TorchRL user would try, the actor around distrl's policy tower, the collector, how a layout is
timed, and the env-only limit. The CartPole, Pong and MuJoCo benches pick their layouts from these
pieces (:mod:`experiments.kit.yardstick`, :mod:`experiments.kit.pong`, ``experiments/bench_mujoco.py``),
so a fix to one layout (an autoreset mode, a thread count) reaches every bench.

Env layouts, fastest first on CPU (docs/benchmarks.md has the figures):

- :func:`vector_env_in_torchrl`: a gymnasium (or ale-py) vector env inside one ``GymWrapper``: one
  TorchRL step per ``n`` env steps, TorchRL's fast CPU layout;
- :func:`serial_env`: ``SerialEnv`` of ``n`` single TorchRL envs, TorchRL's per-env way, which
  pays TorchRL's per-env overhead on every frame.

Threads: one torch thread in this process and one in each collector worker (``num_threads=1,
num_sub_threads=1``), as distrl's processes have (:func:`experiments.kit.measure.one_thread`).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Callable, Optional

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from tensordict import TensorDictBase
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torch.distributions import Categorical
from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from torchrl.envs import DoubleToFloat, EnvBase, GymEnv, GymWrapper, SerialEnv, TransformedEnv
from torchrl.modules import IndependentNormal, ProbabilisticActor

from experiments.kit.measure import one_thread

# ---- envs ---------------------------------------------------------------------------------------


def gym_vector_env(env_id: str, n: int) -> SyncVectorEnv:
    """gymnasium's ``SyncVectorEnv`` of ``n`` envs of ``env_id``, autoreset ``SAME_STEP``: TorchRL's
    ``GymWrapper`` refuses ``NEXT_STEP`` and reads ``SAME_STEP`` correctly."""
    return SyncVectorEnv([lambda: gym.make(env_id) for _ in range(n)], autoreset_mode=AutoresetMode.SAME_STEP)


def as_float32(env: EnvBase, on: bool = True) -> EnvBase:
    """``env`` behind ``DoubleToFloat`` when ``on`` (MuJoCo's float64 observations for a float32 policy)."""
    return TransformedEnv(env, DoubleToFloat()) if on else env


def vector_env_in_torchrl(make_vector_env: Callable[[], gym.vector.VectorEnv], to_float32: bool = False) -> EnvBase:
    """A gymnasium (or ale-py) vector env inside one ``GymWrapper``; actions as indices
    (``categorical_action_encoding``: the one-hot default fails inside gymnasium), floats as float32
    when ``to_float32``."""
    return as_float32(GymWrapper(make_vector_env(), categorical_action_encoding=True), to_float32)


def gym_env(env_id: str) -> EnvBase:
    """One TorchRL ``GymEnv`` of ``env_id``, actions as indices."""
    return GymEnv(env_id, categorical_action_encoding=True)


def gym_wrapped(make_env: Callable[[], gym.Env]) -> EnvBase:
    """One gymnasium env (with its own wrappers, e.g. Atari preprocessing) inside ``GymWrapper``."""
    return GymWrapper(make_env(), categorical_action_encoding=True)


def serial_env(n: int, make_one: Callable[[], EnvBase], to_float32: bool = False) -> EnvBase:
    """``SerialEnv`` of ``n`` TorchRL envs made by ``make_one`` (:func:`gym_env`, :func:`gym_wrapped`)."""
    return as_float32(SerialEnv(n, make_one), to_float32)


# ---- the policy ---------------------------------------------------------------------------------


def categorical_actor(policy: nn.Module) -> ProbabilisticActor:
    """distrl's policy tower (``observation [*B, *F] -> logits [*B, A]``) as a TorchRL actor that
    samples a ``Categorical`` and writes ``action_log_prob``."""
    return ProbabilisticActor(
        TensorDictModule(policy, in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=Categorical,
        return_log_prob=True,
    )


def gaussian_actor(policy: nn.Module) -> ProbabilisticActor:
    """distrl's Gaussian policy tower (``observation [*B, *F] -> cat(mean, log_std) [*B, 2A]``) as a
    TorchRL actor: TorchRL's ``NormalParamExtractor`` (``scale = exp(log_std)``) and an
    ``IndependentNormal``."""
    module = TensorDictModule(
        nn.Sequential(policy, NormalParamExtractor(scale_mapping="exp")),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )
    return ProbabilisticActor(
        module, in_keys=["loc", "scale"], distribution_class=IndependentNormal, return_log_prob=True
    )


# ---- the collector and how it is timed -------------------------------------------------------------


def collector(
    make_env: Callable[[], EnvBase], policy: nn.Module, frames_per_batch: int, workers: int, asynchronous: bool = False
):
    """``MultiSyncCollector`` (``MultiAsyncCollector`` if ``asynchronous``: its workers collect the
    next batch while this process trains on the last) over ``workers`` processes of one thread
    each, or a plain ``Collector`` in this process when ``workers == 0``; endless (``total_frames=-1``)."""
    one_thread()  # before the layout is built, not after it
    if workers == 0:
        return Collector(make_env(), policy, frames_per_batch=frames_per_batch, total_frames=-1)
    multi = MultiAsyncCollector if asynchronous else MultiSyncCollector
    return multi(
        [make_env] * workers,
        policy,
        frames_per_batch=frames_per_batch,
        total_frames=-1,
        num_threads=1,
        num_sub_threads=1,
    )


def first_batch_fps(
    collector,
    frames: Optional[int] = None,
    seconds: Optional[float] = None,
    update: Optional[Callable[[TensorDictBase], None]] = None,
) -> float:
    """Frames per wall-clock second of ``collector`` after its first batch (left out, as distrl's
    first batch is: worker start, first resets), over ``frames`` frames or ``seconds`` seconds,
    ``update(batch)`` called on every batch (training in this process); then the collector is shut down."""
    if frames is None and seconds is None:
        raise ValueError("first_batch_fps needs frames or seconds: it would never stop")
    try:
        it = iter(collector)
        next(it)
        done, start = 0, time.perf_counter()
        while (frames is None or done < frames) and (seconds is None or time.perf_counter() - start < seconds):
            batch = next(it)
            done += batch.numel()
            if update is not None:
                update(batch)
        return done / (time.perf_counter() - start)
    finally:
        collector.shutdown()
        one_thread()  # a MultiSyncCollector's shutdown gives this process its threads back


# ---- the env-only limit ---------------------------------------------------------------------------


def random_steps_per_s(make_env: Callable[[], gym.vector.VectorEnv], seconds: float, pool: int = 256) -> float:
    """Env steps/s (wall) of one vector env stepped with pre-sampled random actions, no policy."""
    env = make_env()
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [np.asarray(env.action_space.sample()) for _ in range(pool)]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[steps % pool])
        steps += 1
    rate = steps * env.num_envs / (time.perf_counter() - start)
    env.close()
    return rate


def _put_random_steps(make_env: Callable[[], gym.vector.VectorEnv], seconds: float, result) -> None:
    result.put(random_steps_per_s(make_env, seconds))


def env_only_fps(make_env: Callable[[], gym.vector.VectorEnv], procs: int, seconds: float) -> float:
    """The limit: ``procs`` processes each stepping ``make_env()`` (picklable: a ``functools.partial``)
    with random actions for ``seconds``, their steps/s summed. No RL system collects faster here."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    workers = [ctx.Process(target=_put_random_steps, args=(make_env, seconds, q)) for _ in range(procs)]
    for w in workers:
        w.start()
    total = sum(q.get(timeout=seconds + 120) for _ in workers)  # a spawned child imports torch first
    for w in workers:
        w.join()
    return total
