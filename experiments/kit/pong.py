"""Pong as every Atari bench builds it (``experiments/bench_atari.py``, ``experiments/torchrl_atari.py``):
the env and network the recipes use, TorchRL collecting (and training) with that network in the
layouts a knowledgeable user would try, and the env-only limit.

TorchRL layouts (``cores`` workers, one torch thread each, as pytorch/rl issue 1325 advises for
Atari), pieces of :mod:`experiments.kit.torchrl_layouts`:

- ``MultiSyncCollector``, ``cores`` workers x ``GymWrapper(AtariVectorEnv(16, 1 thread))``: ale-py's
  C++ vector env (the preprocessing in C++) inside each worker: one TorchRL step per 16 env steps;
- the same with ``MultiAsyncCollector`` (a worker collects its next batch while this process
  trains on the last: what a user who trains picks);
- ``Collector`` here x ``GymWrapper(AtariVectorEnv(16 x cores, cores threads))``: no worker
  processes, the emulators on ale-py's thread pool, the policy in this process;
- ``MultiSyncCollector``, ``cores`` workers x ``SerialEnv(4 x GymWrapper(make_atari_env))``:
  gymnasium's ``AtariPreprocessing`` + ``FrameStackObservation`` per env, TorchRL's per-env way.

The policy is distrl's ``ActorCritic`` policy tower (Nature or IMPALA encoder, uint8 in) in a
``ProbabilisticActor`` with a ``Categorical``; each layout is timed by the wall clock from its
first batch on. The three ale-py layouts then run again with training: per batch, GAE and one pass
of ``ClipPPOLoss`` (``functional=False``: the policy and value towers share one torso) over
minibatches of 256 in this process, Adam, and the new weights sent to the workers.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from tensordict import TensorDictBase
from torchrl.modules import ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from distrl.config import AtariConfig, NetConfig
from distrl.envs.atari import make_atari_env, make_atari_vector_env
from distrl.nn.models import ActorCritic
from experiments.kit.torchrl_layouts import (
    categorical_actor,
    collector,
    env_only_fps,
    first_batch_fps,
    gym_wrapped,
    random_steps_per_s,
    serial_env,
    vector_env_in_torchrl,
)

ENV_ID = "ALE/Pong-v5"
OBS, ACTIONS, SKIP = (4, 84, 84), 6, 4  # Pong: uint8 [4, 84, 84], 6 actions, 4 emulator frames an agent step
ENVS = 16  #: envs of one ale-py vector env (the ideal, the limit, TorchRL's workers)


def vector_env(n: int, threads: int):
    """ale-py's C++ vector env of Pong as the recipes build it (``distrl/envs/atari.py``)."""
    return make_atari_vector_env(ENV_ID, n, 0, AtariConfig(threads=threads))


def model(net: str, precision: str = "float32") -> ActorCritic:
    """The recipes' actor-critic for Pong with encoder ``net`` (``net.precision``: float32 or the
    Atari presets' ``auto``)."""
    return ActorCritic(OBS, ACTIONS, NetConfig(encoder=net, precision=precision))


def ppo_update(net: ActorCritic, actor, critic, collector_) -> Callable[[TensorDictBase], None]:
    """What a TorchRL user trains with per batch ``[B*, T]``: GAE, one pass of ``ClipPPOLoss`` over
    minibatches of 256, Adam, the new weights to the collector's workers."""
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.1, entropy_coeff=0.01, functional=False)
    gae, optim = GAE(gamma=0.99, lmbda=0.95, value_network=critic), torch.optim.Adam(net.parameters(), lr=2.5e-4)

    def update(td: TensorDictBase) -> None:
        with torch.no_grad():
            gae(td)
        for mb in td.reshape(-1).split(256):
            out = loss(mb)
            optim.zero_grad()
            (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            optim.step()
        collector_.update_policy_weights_()

    return update


def torchrl_fps(
    net: str, make_env, envs: int, workers: int, asynchronous: bool, seconds: float, ppo: bool = False
) -> float:
    """Agent steps/s (wall, from the first batch) of a TorchRL collector with the recipes' policy
    (:func:`experiments.kit.torchrl_layouts.collector`); with ``ppo``, :func:`ppo_update` per batch."""
    net_ = model(net)
    actor = categorical_actor(net_.policy)
    batch = max(workers, 1) * envs * max(256 // (max(workers, 1) * envs), 8)
    c = collector(make_env, actor, batch, workers, asynchronous)
    update = ppo_update(net_, actor, ValueOperator(net_.value, in_keys=["observation"]), c) if ppo else None
    return first_batch_fps(c, seconds=seconds, update=update)


def torchrl_layouts(net: str, n_cores: int, seconds: float) -> dict[str, float]:
    """Agent steps/s of every layout collecting only, then of the ale-py ones training (``... + PPO``)."""
    c = n_cores
    vec = (partial(vector_env_in_torchrl, partial(vector_env, ENVS, 1)), ENVS, c)
    collect = {
        f"MultiSyncCollector {c} x GymWrapper(AtariVectorEnv({ENVS}, 1 thread))": (*vec, False),
        f"MultiAsyncCollector {c} x GymWrapper(AtariVectorEnv({ENVS}, 1 thread))": (*vec, True),
        f"Collector 1 x GymWrapper(AtariVectorEnv({ENVS * c}, {c} threads))": (
            partial(vector_env_in_torchrl, partial(vector_env, ENVS * c, c)),
            ENVS * c,
            0,
            False,
        ),
        f"MultiSyncCollector {c} x SerialEnv(4 x GymWrapper(gymnasium AtariPreprocessing))": (
            partial(serial_env, 4, partial(gym_wrapped, partial(make_atari_env, ENV_ID))),
            4,
            c,
            False,
        ),
    }
    out = {name: torchrl_fps(net, *args, seconds) for name, args in collect.items()}
    for name in list(collect)[:3]:
        out[f"{name} + PPO"] = torchrl_fps(net, *collect[name], seconds, ppo=True)
    return out


def env_only(n_cores: int, seconds: float) -> dict[str, float]:
    """Agent steps/s (wall), random actions, no policy, of ``n_cores`` processes x
    ``AtariVectorEnv(16, 1 thread)``, and of 1 process x ``AtariVectorEnv(16 x n_cores, n_cores threads)``."""
    return {
        f"{n_cores} processes x AtariVectorEnv({ENVS}, 1 thread)": env_only_fps(
            partial(vector_env, ENVS, 1), n_cores, seconds
        ),
        f"1 process x AtariVectorEnv({ENVS * n_cores}, {n_cores} threads)": random_steps_per_s(
            partial(vector_env, ENVS * n_cores, n_cores), seconds
        ),
    }
