"""Ape-X (Horgan et al., 2018): actors with an epsilon ladder fill a prioritized replay with
n-step transitions; one learner samples it by priority and trains a double DQN. For continuous
actions (``algo.learner``: a ``Box`` picks it) the learner trains SAC and the actors sample its
policy instead (``sac.py``; Ape-X's paper ran DPG there).

Rank 0 is the learner, ranks 1..R the replay shards (``algo.shards``), every other rank an actor.
At world size 1 the learner, the R shards and ``algo.local_actors`` actors share one process.

Presets (``--experiment NAME``): ``default`` is the CartPole run; ``debug`` finishes in seconds; ``minatar`` learns
MinAtar Breakout
from its ``[4, 10, 10]`` bool images; ``mujoco`` (every MuJoCo id's ``--env`` picks it) is SAC.
"""

from __future__ import annotations


from distrl.config import Config, NetConfig, RunConfig, override
from distrl.recipes.base import ATARI_RUN, DEBUG_RUN, MUJOCO_RUN, Recipe, role
from distrl.recipes.apex.config import ApexConfig, learner_kind


# The presets are tables of settings, kept dense as tables (ruff's formatter would give each its line).
# fmt: off
def default() -> Config:
    """CartPole-v1: 1 replay shard, 16 envs per actor, 3-step double DQN with a dueling head, set to
    hold 475 once reached: Adam at 1e-4, a target copy every 2,000 updates, a replay of 1M and four
    actors at world size 1 held it on 8 of 10 seeds over 600 s, where the dataclass's settings (lr
    2.5e-4, every 500, 100k, two actors) reach it twice as fast and collapse at high frame rates
    (docs/apex.md). The other presets pin their own replay and actors."""
    # ReLU Q-networks, as DQN; the actor-critic recipes keep tanh.
    algo = ApexConfig(lr=1e-4, target_update_interval=2_000, capacity=1_000_000, local_actors=4)
    return Config(recipe="apex", algo=algo, run=RunConfig(env="CartPole-v1"),
                  net=NetConfig(hidden=(128, 128), activation="relu"))


def minatar() -> Config:
    """MinAtar/Breakout-v1 (10x10 images, the minatar encoder), stopping at a greedy score of 10;
    the DQN settings of Young & Tian's MinAtar baselines where they apply (replay 100k, lr 2.5e-4).

    An actor's wire stays within a step's 400-byte observation plus 64 bytes
    (tests/test_apex_wire.py): unrolls of 128 steps send 131 observations for 128 transitions
    (409 bytes a step, 14 more per transition), and a pull of the 528 KB net every 16,000 steps
    costs 33 bytes a step."""
    return override(
        default(),
        **{"run.env": "MinAtar/Breakout-v1", "run.total_frames": 50_000_000, "run.max_time_s": 1200.0,
           "run.target_return": 10.0, "run.eval_episodes": 10, "algo.envs_per_actor": 8, "algo.lr": 2.5e-4,
           "algo.min_replay_size": 5_000, "algo.target_update_interval": 1_000, "algo.batch_size": 64,
           "algo.unroll_length": 128, "algo.params_interval_frames": 16_000, "algo.capacity": 100_000,
           "algo.local_actors": 2},
    )


def atari() -> Config:
    """``ALE/*`` games (Pong by default; the Nature encoder): Ape-X's n = 3, Adam at 6.25e-5 with eps
    1.5e-4 (Hessel et al.'s), a target copy every 2,500 updates, batches of 64; a shard holds 200k
    transitions (each frame stored once, docs/atari.md) and serves from 20k."""
    return override(
        default(),
        **{**ATARI_RUN, "algo.envs_per_actor": 8, "algo.unroll_length": 64, "algo.lr": 6.25e-5,
           "algo.adam_eps": 1.5e-4, "algo.capacity": 200_000, "algo.min_replay_size": 20_000,
           "algo.target_update_interval": 2_500, "algo.batch_size": 64, "algo.params_interval_frames": 16_000,
           "algo.local_actors": 2},
    )


def mujoco() -> Config:
    """SAC on MuJoCo (HalfCheetah-v5 by default; every MuJoCo id's ``--env`` picks it). Sources:
    CleanRL's ``sac_continuous_action.py`` and SB3 rl-zoo3's ``hyperparams/sac.yml`` (MuJoCo rows):
    Adam at 3e-4 for policy, critics and temperature (rl-zoo3; CleanRL's critics take 1e-3), batch
    256, tau 0.005, gamma 0.99, 1-step returns, replay of 1M, (256, 256) ReLU MLPs, the temperature
    from 1 tuned toward entropy -|A| (both); 5k random steps before the policy acts and learning
    from 5k transitions (CleanRL's ``learning_starts``; rl-zoo3's 10k); one update of 256 per env step
    (both): ``samples_per_insert`` 256; uniform sampling (``alpha`` 0, as both). No gradient clip
    (neither has one: the bound is out of reach). distrl's own: 4 envs per actor in unrolls of 16 (the
    rate limiter's default tolerance of 20k samples lets an actor run 78 env steps ahead of 1:1),
    observations normalised as every distrl MuJoCo policy (``net.obs_norm``; neither reference
    does), 30 minutes (the budget its learning targets are set at), and the MLPs' hidden layers in
    bfloat16 where the CPU computes it natively (``net.precision=auto``; heads, losses and Adam in
    float32): an update at HalfCheetah's sizes costs 0.5x float32's on these CPUs, so the learner, the
    bound at one update per env step, trains twice the env steps in the budget (docs/apex.md)."""
    return override(
        default(),
        # (in this order: each setting is checked as it lands, and the rate limiter's tolerance needs small inserts)
        **{**MUJOCO_RUN, "run.max_time_s": 1800.0, "algo.learner": "sac", "algo.local_actors": 1,
           "algo.envs_per_actor": 4, "algo.unroll_length": 16, "algo.lr": 3e-4, "algo.batch_size": 256,
           "algo.tau": 0.005, "algo.gamma": 0.99, "algo.n_step": 1, "algo.capacity": 1_000_000,
           "algo.min_replay_size": 5_000, "algo.random_steps": 5_000, "algo.samples_per_insert": 256.0,
           "algo.alpha": 0.0, "algo.max_grad_norm": 1e6, "net.hidden": (256, 256), "net.activation": "relu",
           "net.precision": "auto"},
    )


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{**DEBUG_RUN, "run.total_frames": 12_000, "algo.envs_per_actor": 8, "algo.unroll_length": 10,
           "algo.min_replay_size": 500, "algo.batch_size": 64, "algo.target_update_interval": 50,
           "algo.samples_per_insert": 4.0, "algo.spi_tolerance": 1000.0, "net.hidden": (32,), "algo.lr": 1e-3,
           # the toy env is a bandit: a short horizon makes the action gap large
           "algo.gamma": 0.5, "algo.capacity": 100_000, "algo.local_actors": 2},
    )
# fmt: on


def _check_config(cfg: Config) -> None:
    from distrl.envs.gym import env_info, is_factory  # gymnasium loads only when a config is checked
    from distrl.envs.torchrl_env import action_box

    info = env_info(cfg.run.env)
    if learner_kind(cfg) == "dqn":
        if info.num_actions is None:
            raise ValueError(
                f"apex's double-DQN learner (algo.learner={cfg.algo.learner}) acts in discrete action spaces "
                f"only; {cfg.run.env} is continuous: use algo.learner=sac (or auto)"
            )
        return
    if info.num_actions is not None or len(info.shape) != 1:
        raise ValueError(
            f"apex's SAC learner (algo.learner={cfg.algo.learner}) takes flat observations and a Box action "
            f"space; {cfg.run.env} is not one: use algo.learner=dqn for discrete actions"
        )
    if is_factory(cfg.run.env):
        action_box(cfg.run.env)  # its policy squashes into the box: an unbounded one is refused in one line


def _roles(world_size: int, cfg: Config) -> list[str]:
    shards = cfg.algo.shards
    return ["learner"] + ["replay"] * shards + ["actor"] * (world_size - 1 - shards)


RECIPE = Recipe(
    name="apex",
    description="Ape-X: actors fill a prioritized replay service; a double-DQN or (for a Box) SAC learner samples it",
    layout="rank 0 learner, ranks 1..R replay shards (algo.shards), the rest actors",
    min_world_size=3,
    roles_for=lambda n: _roles(n, default()),
    builders={
        "learner": role("distrl.recipes.apex.sac:learner"),  # SAC's or double DQN's, by algo.learner
        "replay": role("distrl.replay.server:ReplayServer"),
        "actor": role("distrl.recipes.apex.sac:actor"),
    },
    default_config=default,
    local_world_size=lambda cfg: 1 + cfg.algo.shards + cfg.algo.local_actors,
    check_config=_check_config,
    takes_env_factory=True,
    roles_for_config=_roles,
    source_roles=frozenset({"actor"}),
    min_world_size_for=lambda cfg: cfg.algo.shards + 2,
    compare_nproc=4,
    table_row=("Ape-X", "2018", "CPU (inference)", "GPU", "async", "off-policy (DQN, SAC)"),
    policy_network="q_network",  # a SAC run saves "sac" (ApexSACLearner)
    fixed_on_resume=("algo.shards", "algo.learner"),  # the checkpoint holds one replay a shard, one learner's state
)
