"""seed_apex: SEED's central batched inference feeding Ape-X's prioritized replay, a design no
paper names, composed outside ``distrl/`` from the roles of ``seed`` and ``apex``.

Rank 0 is the learner, and in the same process SEED's inference server: env workers send
observations and get actions back, chosen epsilon-greedily on the learner's own Q-network, each
env at its rung of Ape-X's epsilon ladder (computed here, over every env of every worker). The
server cuts each env group's steps into n-step windows; a writer thread turns them into
transitions with initial priorities and inserts them into the replay shards, ranks 1..R
(``algo.shards``). The learner samples the shards by priority and trains a double DQN with
n-step targets, as Ape-X's. Every other rank is SEED's env worker, which steps envs only. At world
size 1 the learner, the R shards and ``algo.local_workers`` env workers share one process.

    distrl train experiments/examples/custom/seed_apex.py:recipe --nproc 4 --env CartPole-v1 --target-return 475

Presets (``--experiment NAME``): ``default`` is the CartPole run; ``debug`` finishes in seconds on
the toy env. docs/custom_recipe.md builds this file step by step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from distrl.config import Config, NetConfig, RunConfig, check, override
from distrl.recipes import Recipe, file_spec
from distrl.recipes.base import require_discrete_actions, role
from distrl.replay.config import ReplayConfig

HERE = Path(__file__).resolve().parent
SPEC = file_spec(__file__, "recipe")  #: what Config.recipe holds: every rank and --resume load this file


@dataclass(frozen=True)
class SeedApexConfig:
    """SEED's env-worker and inference fields (same names: its roles read them), Ape-X's
    exploration, replay and learner fields."""

    # -- env workers and the inference server (distrl/recipes/seed) --
    envs_per_worker: int = 32  #: gymnasium envs each env worker steps, split into groups
    groups_per_worker: int = 2  #: env groups per worker, stepped in turn while the others' requests are in flight
    local_workers: int = 2  #: env workers in the one process at world size 1
    unroll_length: int = 16  #: steps per window the server cuts for each env group (T)
    queue_size: int = 4  #: windows waiting for the writer; a full queue holds the inference thread
    put_timeout_s: float = 2.0  #: how long inference waits for queue space, then drops the window
    max_batch_envs: int = 512  #: an inference batch closes once it holds this many observations...
    max_wait_ms: float = 0.5  #: ...or this long after its first request arrived
    request_timeout_s: float = 10.0  #: bound on a request handler's wait for its batch; below the call timeout
    # -- exploration: Ape-X's ladder, over envs (distrl/roles/epsilon_greedy.py) --
    eps_base: float = 0.4  #: env i of N explores with eps_base^(1 + eps_alpha i / (N - 1))
    eps_alpha: float = 7.0  #: epsilon ladder exponent
    #: episodes of envs exploring more go to env_worker/return_exploring, not the training mean
    report_max_eps: float = 0.05
    # -- replay shards (distrl/replay) --
    shards: int = 1  #: replay shards R (ranks 1..R)
    capacity: int = 100_000  #: transitions each shard keeps (FIFO beyond)
    min_replay_size: int = 2_000  #: transitions a shard must hold before it serves samples
    alpha: float = 0.6  #: priority exponent
    beta0: float = 0.4  #: importance-weight exponent at the start, annealed linearly to 1
    beta_anneal_updates: int = 20_000  #: learner updates over which beta reaches 1
    priority_eps: float = 1e-3  #: p_i = |delta_i| + priority_eps
    weight_norm: str = "batch"  #: importance weights divided by their max over the batch or the whole buffer
    samples_per_insert: float = 2.0  #: target sampled/inserted ratio of each shard (0: no rate limit; apex: 4)
    spi_tolerance: float = 20_000.0  #: how far (in sampled items) a shard may drift from that ratio
    insert_queue_size: int = 8  #: insert messages a shard queues before it holds the writer
    hold_sleep_s: float = 0.02  #: how long a held writer or learner waits before it tries again
    # -- the learner (distrl/recipes/apex/learner.py, distrl/algorithms/apex.py) --
    n_step: int = 3  #: steps of reward in a transition's return before it bootstraps
    gamma: float = 0.99  #: discount
    dueling: bool = False  #: the Q-network's head: V + A - mean A (apex's default; slower to 475 here)
    batch_size: int = 128  #: transitions per learner update
    lr: float = 1e-3  #: Adam learning rate (apex: 2.5e-4, which holds 475 better but reaches it later)
    adam_eps: float = 1e-8  #: Adam's epsilon
    target_update_interval: int = 100  #: learner updates between target-network copies (apex: 500)
    huber_delta: float = 1.0  #: Huber loss threshold
    max_grad_norm: float = 10.0  #: global gradient-norm clip
    prefetch: bool = True  #: request the next sample before training on the current one

    def __post_init__(self):
        for name in (
            "envs_per_worker",
            "groups_per_worker",
            "local_workers",
            "unroll_length",
            "queue_size",
            "max_batch_envs",
            "shards",
            "capacity",
            "beta_anneal_updates",
            "insert_queue_size",
            "n_step",
            "batch_size",
            "target_update_interval",
        ):
            check(getattr(self, name) >= 1, f"algo.{name} must be >= 1, got {getattr(self, name)}")
        check(
            self.envs_per_worker % self.groups_per_worker == 0,
            f"algo.envs_per_worker ({self.envs_per_worker}) must be a multiple of algo.groups_per_worker "
            f"({self.groups_per_worker})",
        )
        check(
            self.n_step <= self.unroll_length,
            f"algo.n_step ({self.n_step}) must be <= algo.unroll_length ({self.unroll_length})",
        )
        check(
            self.max_wait_ms >= 0 and self.put_timeout_s > 0 and self.request_timeout_s > 0,
            "algo.max_wait_ms must be >= 0, algo.put_timeout_s and algo.request_timeout_s > 0",
        )
        check(0 < self.eps_base <= 1 and self.eps_alpha >= 0, "algo.eps_base must be in (0, 1], algo.eps_alpha >= 0")
        check(0 <= self.report_max_eps <= 1, "algo.report_max_eps must be in [0, 1]")
        check(0 <= self.min_replay_size <= self.capacity, "algo.min_replay_size must be in [0, algo.capacity]")
        check(self.alpha >= 0 and 0 <= self.beta0 <= 1, "algo.alpha must be >= 0 and algo.beta0 in [0, 1]")
        check(
            self.weight_norm in ("batch", "buffer"),
            f"algo.weight_norm must be batch or buffer, got {self.weight_norm!r}",
        )
        check(self.priority_eps > 0 and self.hold_sleep_s > 0, "algo.priority_eps and algo.hold_sleep_s must be > 0")
        check(self.samples_per_insert >= 0, "algo.samples_per_insert must be >= 0")
        need = self.batch_size + self.samples_per_insert * self.envs_per_group * self.unroll_length
        check(
            self.samples_per_insert == 0 or 2 * self.spi_tolerance >= need,
            f"algo.spi_tolerance ({self.spi_tolerance:g}) must be at least half of batch_size + samples_per_insert "
            f"* envs_per_group * unroll_length ({need:g}), or a shard can hold both sides at once",
        )
        check(0 < self.gamma <= 1, "algo.gamma must be in (0, 1]")
        check(
            self.lr > 0 and self.adam_eps > 0 and self.huber_delta > 0 and self.max_grad_norm > 0,
            "algo.lr, algo.adam_eps, algo.huber_delta and algo.max_grad_norm must be > 0",
        )

    @property
    def envs_per_group(self) -> int:
        """Observations per request (B of one window)."""
        return self.envs_per_worker // self.groups_per_worker

    @property
    def core(self) -> str:
        """The policy core SEED's server expects: a feed-forward Q-network."""
        return "mlp"

    @property
    def replay(self) -> ReplayConfig:
        """What each replay shard (ranks 1..R) is built with."""
        return ReplayConfig(
            capacity=self.capacity,
            alpha=self.alpha,
            priority_eps=self.priority_eps,
            min_size=self.min_replay_size,
            samples_per_insert=self.samples_per_insert,
            spi_tolerance=self.spi_tolerance,
            queue_size=self.insert_queue_size,
        )


def default() -> Config:
    """CartPole-v1: 2 groups of 16 envs per env worker, 1 replay shard, 3-step double DQN."""
    return Config(
        recipe=SPEC,
        algo=SeedApexConfig(),
        run=RunConfig(env="CartPole-v1"),
        net=NetConfig(hidden=(128, 128), activation="relu"),
    )


def minatar() -> Config:
    """MinAtar/Breakout-v1 (the minatar encoder picked for its images): Ape-X's MinAtar DQN settings
    (lr 2.5e-4, replay warm-up 5k, target copy every 1,000 updates, batches of 64)."""
    return override(
        default(),
        **{
            "run.env": "MinAtar/Breakout-v1",
            "run.total_frames": 50_000_000,
            "run.max_time_s": 1200.0,
            "run.target_return": 10.0,
            "run.eval_episodes": 10,
            "algo.lr": 2.5e-4,
            "algo.min_replay_size": 5_000,
            "algo.target_update_interval": 1_000,
            "algo.batch_size": 64,
        },
    )


#: the preset ``distrl train`` picks for an env id when ``--experiment`` is not given
ENV_EXPERIMENTS = {"MinAtar/Breakout-v1": "minatar"}


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{
            "run.env": "distrl/MatchSign-v0",
            "run.total_frames": 12_000,
            "run.max_time_s": 60.0,
            "run.eval_episodes": 10,
            "run.logger": "none",
            "algo.envs_per_worker": 8,
            "algo.unroll_length": 10,
            "algo.min_replay_size": 500,
            "algo.batch_size": 64,
            "algo.target_update_interval": 50,
            "algo.spi_tolerance": 1000.0,
            "net.hidden": (32,),
            "algo.gamma": 0.5,
        },  # the toy env is a bandit: a short horizon makes the action gap large
    )


def _check_config(cfg: Config) -> None:
    require_discrete_actions(cfg)
    if cfg.algo.request_timeout_s >= cfg.transport.call_timeout_s:
        raise ValueError(
            f"algo.request_timeout_s ({cfg.algo.request_timeout_s}) must be below "
            f"transport.call_timeout_s ({cfg.transport.call_timeout_s}) so the server answers first"
        )


def _roles(world_size: int, cfg: Config) -> list[str]:
    shards = cfg.algo.shards
    return ["learner"] + ["replay"] * shards + ["env_worker"] * (world_size - 1 - shards)


recipe = Recipe(
    name="seed_apex",
    description="SEED's batched inference (epsilon ladder over envs) feeding Ape-X's prioritized replay; double DQN",
    layout="rank 0 learner + inference server, ranks 1..R replay shards (algo.shards), the rest env workers",
    min_world_size=3,
    roles_for=lambda n: _roles(n, default()),
    builders={
        "learner": role(f"{HERE / 'seed_apex_learner.py'}:SeedApexLearner"),
        "replay": role("distrl.replay.server:ReplayServer"),
        "env_worker": role("distrl.recipes.seed.env_worker:SeedEnvWorker"),
    },
    default_config=default,
    local_world_size=lambda cfg: 1 + cfg.algo.shards + cfg.algo.local_workers,
    check_config=_check_config,
    roles_for_config=_roles,
    source_roles=frozenset({"env_worker"}),
    min_world_size_for=lambda cfg: cfg.algo.shards + 2,
    table_row=(
        "SEED + Ape-X (distrl's example)",
        "-",
        "CPU (envs only); inference on the learner",
        "GPU",
        "async",
        "off-policy with central inference",
    ),
    policy_network="q_network",
)
