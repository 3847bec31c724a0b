"""TorchRL collecting Pong with the recipes' actor-critic, in the layouts a knowledgeable user would
try, for ``experiments/bench_atari.py`` (item (a)); also the pieces every Atari bench shares.

    python experiments/torchrl_atari.py [--net nature] [--seconds 20]

Layouts (``cores`` workers, one torch thread each, as pytorch/rl issue 1325 advises for Atari):

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
first batch on. The three ale-py layouts then run again with training: per batch, GAE and one pass of
``ClipPPOLoss`` (``functional=False``: the policy and value towers share one torso) over
minibatches of 256 in this process, Adam, and the new weights sent to the workers.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.measure import one_thread

ENV_ID = "ALE/Pong-v5"
OBS, ACTIONS, SKIP = (4, 84, 84), 6, 4  # Pong: uint8 [4, 84, 84], 6 actions, 4 emulator frames an agent step
ENVS = 16  #: envs of one ale-py vector env (the ideal, the limit, TorchRL's workers)


def vector_env(n: int, threads: int):
    """ale-py's C++ vector env of Pong as the recipes build it (``distrl/envs/atari.py``)."""
    from distrl.config import AtariConfig
    from distrl.envs.atari import make_atari_vector_env

    return make_atari_vector_env(ENV_ID, n, 0, AtariConfig(threads=threads))


def model(net: str, precision: str = "float32"):
    """The recipes' actor-critic for Pong with encoder ``net`` (``net.precision``: float32 or the
    Atari presets' ``auto``)."""
    from distrl.config import NetConfig
    from distrl.nn.models import ActorCritic

    return ActorCritic(OBS, ACTIONS, NetConfig(encoder=net, precision=precision))


def _wrapped_vector(n: int, threads: int):
    from torchrl.envs import GymWrapper

    return GymWrapper(vector_env(n, threads), categorical_action_encoding=True)


def _serial_gym(n: int):
    from torchrl.envs import GymWrapper, SerialEnv

    from distrl.envs.atari import make_atari_env

    return SerialEnv(n, lambda: GymWrapper(make_atari_env(ENV_ID), categorical_action_encoding=True))


def _actor_critic(net: str):
    from tensordict.nn import TensorDictModule
    from torch.distributions import Categorical
    from torchrl.modules import ProbabilisticActor, ValueOperator

    m = model(net)
    actor = ProbabilisticActor(TensorDictModule(m.policy, in_keys=["observation"], out_keys=["logits"]),
                               in_keys=["logits"], distribution_class=Categorical, return_log_prob=True)
    return m, actor, ValueOperator(m.value, in_keys=["observation"])


def torchrl_fps(net: str, make_env, envs: int, workers: int, asynchronous: bool, seconds: float,
                ppo: bool = False) -> float:
    """Agent steps/s (wall, from the first batch) of a TorchRL collector with the recipes' policy:
    ``MultiSyncCollector`` (``MultiAsyncCollector`` if ``asynchronous``: its workers collect while
    this process trains) over ``workers`` processes (one torch thread each), or a ``Collector``
    here when ``workers == 0``; with ``ppo``, one ``ClipPPOLoss`` pass per batch in this process."""
    import torch
    from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    one_thread()
    net_, actor, critic = _actor_critic(net)
    batch = max(workers, 1) * envs * max(256 // (max(workers, 1) * envs), 8)
    if workers:
        multi = MultiAsyncCollector if asynchronous else MultiSyncCollector
        collector = multi([make_env] * workers, actor, frames_per_batch=batch, total_frames=-1,
                          num_threads=1, num_sub_threads=1)
    else:
        collector = Collector(make_env(), actor, frames_per_batch=batch, total_frames=-1)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.1, entropy_coeff=0.01, functional=False)
    gae, optim = GAE(gamma=0.99, lmbda=0.95, value_network=critic), torch.optim.Adam(net_.parameters(), lr=2.5e-4)

    def update(td) -> None:
        with torch.no_grad():
            gae(td)
        for mb in td.reshape(-1).split(256):
            out = loss(mb)
            optim.zero_grad()
            (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
            torch.nn.utils.clip_grad_norm_(net_.parameters(), 0.5)
            optim.step()
        collector.update_policy_weights_()

    try:
        it = iter(collector)
        next(it)  # left out: worker start, first resets
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            td = next(it)
            done += td.numel()
            if ppo:
                update(td)
        return done / (time.perf_counter() - start)
    finally:
        collector.shutdown()
        one_thread()


def torchrl_layouts(net: str, n_cores: int, seconds: float) -> dict[str, float]:
    """Agent steps/s of every layout collecting only, then of the ale-py ones training (``... + PPO``)."""
    from functools import partial

    c = n_cores
    vec = (partial(_wrapped_vector, ENVS, 1), ENVS, c)
    collect = {
        f"MultiSyncCollector {c} x GymWrapper(AtariVectorEnv({ENVS}, 1 thread))": (*vec, False),
        f"MultiAsyncCollector {c} x GymWrapper(AtariVectorEnv({ENVS}, 1 thread))": (*vec, True),
        f"Collector 1 x GymWrapper(AtariVectorEnv({ENVS * c}, {c} threads))":
            (partial(_wrapped_vector, ENVS * c, c), ENVS * c, 0, False),
        f"MultiSyncCollector {c} x SerialEnv(4 x GymWrapper(gymnasium AtariPreprocessing))":
            (partial(_serial_gym, 4), 4, c, False),
    }
    out = {name: torchrl_fps(net, *args, seconds) for name, args in collect.items()}
    for name in list(collect)[:3]:
        out[f"{name} + PPO"] = torchrl_fps(net, *collect[name], seconds, ppo=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", default="nature", help="encoder: nature or impala")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of each layout after its first batch")
    args = ap.parse_args()
    for name, fps in torchrl_layouts(args.net, len(os.sched_getaffinity(0)), args.seconds).items():
        print(f"torchrl {name}: {fps:,.0f} agent steps/s ({SKIP * fps:,.0f} frames/s), wall, from the first batch",
              flush=True)
    os._exit(0)  # torchrl 0.14.1's WeightSyncScheme.__del__ hangs at interpreter exit


if __name__ == "__main__":
    main()
