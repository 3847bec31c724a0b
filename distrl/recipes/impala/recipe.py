"""IMPALA (Espeholt et al., 2018): actors run a behaviour policy and ship trajectories; the
learner corrects their lag with V-trace.

Rank 0 is the learner, every other rank an actor. At world size 1 the learner and
``algo.local_actors`` actors share one process over the local transport.

Presets (``--experiment NAME``): ``default`` is the README's CartPole run; ``debug`` finishes in
seconds; ``minatar`` learns MinAtar Breakout from its ``[4, 10, 10]`` bool images; ``mujoco``
(every MuJoCo id picks it) is continuous control: a Gaussian policy over normalised observations.
"""

from __future__ import annotations


from distrl.config import Config, RunConfig, override
from distrl.recipes.base import ATARI_RUN, DEBUG_RUN, MUJOCO_AC, Recipe, role, check_action_space
from distrl.recipes.impala.config import ImpalaConfig  # noqa: F401 (cfg.algo's class, here as before)


# The presets are tables of settings, kept dense as tables (ruff's formatter would give each its line).
# fmt: off
def default() -> Config:
    """CartPole-v1 with 32 envs per actor; reaches 475 in well under the time budget."""
    return Config(recipe="impala", algo=ImpalaConfig(), run=RunConfig(env="CartPole-v1"))


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{**DEBUG_RUN, "algo.envs_per_actor": 8, "algo.unroll_length": 20},
    )


def minatar() -> Config:
    """MinAtar/Breakout-v1 (10x10 images, the minatar encoder), stopping at a greedy score of 10."""
    # Bytes per env step on the wire (the bound: the 400-byte observation + 64 = 464). A packed
    # message (distrl/data/compact.py) costs 411 per step (observation 400, action 1, log prob 4,
    # reward 4, terminated and truncated 1 each) and 400 / T for the bootstrap observation (10 at
    # T = 40); an episode's return and length add 12 per episode, its final observation 408 only
    # when a time limit cut it. Parameters are 529 KB, sent to each of the 2 actors once per
    # params_every updates of 2 * 32 * 40 = 2,560 frames: 2 * 529,265 / (16 * 2,560) = 26 per step
    # (825 at 1 with T = 20). So ~447 in all; 456 measured over a 532 s run (1,604 before packing),
    # for a mean policy lag of ~13 updates instead of ~6. The entropy bonus: docs/pixels.md.
    return override(
        default(),
        **{"run.env": "MinAtar/Breakout-v1", "run.total_frames": 50_000_000, "run.max_time_s": 900.0,
           "run.target_return": 10.0, "run.eval_episodes": 10, "algo.envs_per_actor": 32,
           "algo.unroll_length": 40, "algo.params_every": 16, "algo.reward_scale": 1.0, "algo.lr": 6e-4,
           "algo.entropy_coef": 0.05},
    )


def atari() -> Config:
    """``ALE/*`` games (Pong by default; the Nature encoder): Espeholt et al.'s unrolls of 20 steps
    and entropy bonus 0.01, learning rate 6e-4 (Adam here, RMSProp in the paper), clipped rewards unscaled. Advantages
    normalised per batch, as
    sf's preset (docs/atari.md: raw ones left sf's policy uniform on Breakout)."""
    return override(
        default(),
        **{**ATARI_RUN, "algo.envs_per_actor": 16, "algo.unroll_length": 20, "algo.batch_trajectories": 1,
           "algo.params_every": 4, "algo.reward_scale": 1.0, "algo.lr": 6e-4, "algo.entropy_coef": 0.01,
           "algo.normalize_advantage": True},
    )


def mujoco() -> Config:
    """MuJoCo (HalfCheetah-v5 by default): a Gaussian policy (learned log-std vector, std 1 at the
    start) over observations normalised by statistics the learner merges from every actor. PPO's
    MuJoCo network (two tanh MLPs of 64, 64), ``lr`` 3e-4 and gamma 0.99. Advantages normalised per
    batch: V-trace's raw ones scale with the returns, which differ 100x across these envs (and the
    learned log-std, whose gradient is the advantage-weighted score, would follow them); no entropy
    bonus, the log-std shrinks as the advantages say (an entropy term on an unbounded Gaussian only
    pushes the std up). ``reward_scale`` 0.1: HalfCheetah's and InvertedPendulum's discounted
    returns reach ~100 in raw units, ~10 scaled, which the critic reaches in fewer Adam steps. Small
    messages (8 envs x 32 steps) and one per update: many more updates per frame than the CartPole
    setting, where IMPALA's single pass over each batch is what limits it on these envs.
    Measured: docs/continuous.md, "Results"."""
    return override(
        default(),
        **{**MUJOCO_AC, "algo.envs_per_actor": 8, "algo.unroll_length": 32, "algo.batch_trajectories": 1},
    )
# fmt: on


def _check_config(cfg: Config) -> None:
    check_action_space(cfg)


RECIPE = Recipe(
    name="impala",
    description="IMPALA: actors ship trajectories, the learner corrects lag with V-trace",
    layout="rank 0 learner, ranks 1..N-1 actors",
    min_world_size=2,
    roles_for=lambda n: ["learner"] + ["actor"] * (n - 1),
    builders={
        "learner": role("distrl.recipes.impala.learner:ImpalaLearner"),
        "actor": role("distrl.recipes.impala.actor:ImpalaActor"),
    },
    default_config=default,
    local_world_size=lambda cfg: 1 + cfg.algo.local_actors,
    check_config=_check_config,
    takes_env_factory=True,
    compare_nproc=3,
    table_row=("IMPALA", "2018", "CPU (inference)", "GPU", "async", "on-policy at large scale"),
)
