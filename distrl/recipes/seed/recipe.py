"""SEED RL (Espeholt et al., 2020): central batched inference on the learner, env-only workers.

Rank 0 runs the learner and the inference server in one process on ONE model: workers send
observations (plus the reward and episode end of their last step) and get actions back, the
server assembles every env's trajectory itself, and no parameter ever crosses the wire. Every
other rank is an env worker that steps vectors of gymnasium envs and does no inference. At
world size 1, the learner and ``algo.local_workers`` env workers share one process.

Presets (``--experiment NAME``): ``default`` is the CartPole run; ``debug`` finishes in seconds;
``lstm_cartpole`` learns CartPole with the velocities hidden, with an LSTM core on the server; ``minatar`` learns
MinAtar Breakout
from its ``[4, 10, 10]`` bool images; ``mujoco`` serves gymnasium's MuJoCo ids (a Gaussian policy: the
server replies float32 ``[B, A]`` actions, which the env workers' vector envs clip to the box).
"""

from __future__ import annotations


from distrl.config import Config, RunConfig, override
from distrl.envs import partial  # noqa: F401  (registers distrl/CartPoleNoVel-v1)
from distrl.recipes.base import ATARI_RUN, DEBUG_RUN, MUJOCO_AC, Recipe, role, check_action_space
from distrl.recipes.seed.config import CORES, SeedConfig  # noqa: F401 (cfg.algo's class, here as before)


# The presets are tables of settings, kept dense as tables (ruff's formatter would give each its line).
# fmt: off
def default() -> Config:
    """CartPole-v1: 2 groups of 128 envs per env worker, 128 trajectories of 16 steps per update."""
    return Config(recipe="seed", algo=SeedConfig(), run=RunConfig(env="CartPole-v1"))


def minatar() -> Config:
    """MinAtar/Breakout-v1 (10x10 images, the minatar encoder), stopping at a greedy score of 10."""
    return override(
        default(),
        **{"run.env": "MinAtar/Breakout-v1", "run.total_frames": 50_000_000, "run.max_time_s": 1200.0,
           "run.target_return": 10.0, "run.eval_episodes": 10, "algo.envs_per_worker": 64, "algo.batch_size": 64,
           "algo.reward_scale": 1.0, "algo.entropy_coef": 0.05, "algo.lr": 5e-4},
    )


def atari() -> Config:
    """``ALE/*`` games (Pong by default; the Nature encoder): SEED's Atari settings where they fit two
    cores (unrolls of 20, entropy bonus 0.01), 2 groups of 16 envs per env worker, batches of 16 unrolls. Advantages
    normalised per batch, as
    sf's preset (docs/atari.md: raw ones left sf's policy uniform on Breakout)."""
    return override(
        default(),
        **{**ATARI_RUN, "algo.envs_per_worker": 32, "algo.unroll_length": 20, "algo.batch_size": 16,
           "algo.max_batch_envs": 64, "algo.reward_scale": 1.0, "algo.entropy_coef": 0.01, "algo.lr": 6e-4,
           "algo.normalize_advantage": True},
    )


def mujoco() -> Config:
    """gymnasium's MuJoCo ids (HalfCheetah-v5 by default): a Gaussian policy with PPO's MuJoCo network
    (Schulman et al. 2017: 64x64 tanh MLPs, a state-independent log-std from 0, observations
    normalised: ``net.obs_norm=auto``) trained by V-trace.

    2 groups of 16 envs per worker (a MuJoCo step costs ~0.1 ms, so a group's step still hides a
    round trip) and batches of 32 unrolls of 32 steps: 1,024 samples an update, many small updates
    rather than PPO's epochs over 2,048, since V-trace takes each sample once. gamma 0.99 and lr
    3e-4 as PPO; advantages normalised per batch, so the policy's step does not grow with
    HalfCheetah's return scale; no entropy bonus (the learned log-std explores, and a bonus keeps
    it from shrinking); rewards x0.1 so the critic's targets (up to 1/(1-gamma) = 100x a step's
    reward) stay near its output's scale; gradient clip 0.5, PPO's. Measured: docs/continuous.md,
    "Results".
    """
    return override(
        default(),
        **{**MUJOCO_AC, "algo.envs_per_worker": 32, "algo.unroll_length": 32, "algo.batch_size": 32,
           "algo.max_grad_norm": 0.5},
    )


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{**DEBUG_RUN, "algo.envs_per_worker": 16, "algo.unroll_length": 20, "algo.batch_size": 16},
    )


def debug_lstm() -> Config:
    """``debug`` with the LSTM core: the recurrent path end to end in seconds.

    40k frames (twice ``debug``'s) at lr 1e-3 (not the recipe's 3e-4, which is chosen for CartPole's
    hold): what the LSTM test's greedy score of 19 needs on busy cores (the seeds that chose them:
    docs/benchmarks.md, "seed history").
    """
    return override(debug(), **{"algo.core": "lstm", "algo.core_size": 32, "net.hidden": (32,),
                                "run.total_frames": 40_000, "algo.lr": 1e-3})


def lstm_cartpole() -> Config:
    """CartPole with position and angle only (distrl/CartPoleNoVel-v1): memory is required.

    gamma 0.995: without the cart's velocity the policy lets the cart drift, and the episodes it
    loses end out of bounds 200-400 steps later, past gamma 0.99's horizon. It stops at a training
    mean of 490 so that the greedy policy is sharp. Raw advantages (the default). Entropy 0.01 (the
    recipe's default is 0.003), lr 1e-3 and unscaled rewards: the recipe's defaults of the day it
    was measured, kept with it. Measured, and why each setting: docs/seed.md, "LSTM core"; the
    runs of other settings: docs/benchmarks.md, "seed history".
    """
    return override(
        default(),
        **{"run.env": "distrl/CartPoleNoVel-v1", "run.target_return": 490.0, "run.max_time_s": 600.0,
           "algo.core": "lstm", "algo.core_size": 64, "net.hidden": (64,), "algo.gamma": 0.995,
           "algo.entropy_coef": 0.01, "algo.lr": 1e-3, "algo.reward_scale": 1.0},
    )
# fmt: on


def _check_config(cfg: Config) -> None:
    check_action_space(cfg)
    if cfg.algo.core != "mlp":
        from distrl.envs.gym import env_info  # gymnasium loads only when a config is checked

        if env_info(cfg.run.env).action_mask:
            raise ValueError(
                f"seed's algo.core={cfg.algo.core} does not read action masks ({cfg.run.env} has one); "
                "algo.core=mlp does"
            )
    if cfg.algo.request_timeout_s >= cfg.transport.call_timeout_s:
        raise ValueError(
            f"algo.request_timeout_s ({cfg.algo.request_timeout_s}) must be below "
            f"transport.call_timeout_s ({cfg.transport.call_timeout_s}) so the server answers first"
        )


RECIPE = Recipe(
    name="seed",
    description="SEED RL: batched inference on the learner, env-only workers, V-trace",
    layout="rank 0 learner + inference server, ranks 1..N-1 env workers",
    min_world_size=2,
    roles_for=lambda n: ["learner"] + ["env_worker"] * (n - 1),
    builders={
        "learner": role("distrl.recipes.seed.learner:SeedLearner"),
        "env_worker": role("distrl.recipes.seed.env_worker:SeedEnvWorker"),
    },
    default_config=default,
    local_world_size=lambda cfg: 1 + cfg.algo.local_workers,
    check_config=_check_config,
    takes_env_factory=True,
    compare_nproc=4,
    table_row=(
        "SEED RL",
        "2020",
        "CPU (envs only); inference on the learner",
        "GPU/TPU",
        "async",
        "large models, high throughput",
    ),
)
