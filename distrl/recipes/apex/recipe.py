"""Ape-X (Horgan et al., 2018): actors with an epsilon ladder fill a prioritized replay with
n-step transitions; one learner samples it by priority and trains a double DQN.

Rank 0 is the learner, ranks 1..R the replay shards (``algo.shards``), every other rank an actor.
At world size 1 the learner, the R shards and ``algo.local_actors`` actors share one process.

Presets (``--experiment NAME``): ``default`` is the CartPole run; ``debug`` finishes in seconds; ``minatar`` learns MinAtar Breakout
from its ``[4, 10, 10]`` bool images.
"""
from __future__ import annotations

from dataclasses import dataclass

from distrl.config import Config, NetConfig, RunConfig, check, override
from distrl.recipes.base import ATARI_RUN, DEBUG_RUN, Recipe, role, require_discrete_actions
from distrl.replay.config import ReplayConfig


@dataclass(frozen=True)
class ApexConfig:
    """Ape-X's actor, replay and learner settings."""

    shards: int = 1  #: replay shards R (ranks 1..R); the learner samples each in proportion to its total priority
    local_actors: int = 2  #: actors in the one process at world size 1
    envs_per_actor: int = 16  #: gymnasium envs each actor steps as one vector
    unroll_length: int = 16  #: steps per insert message (T); each message carries about B * T transitions
    n_step: int = 3  #: steps of reward in a transition's return before it bootstraps
    dueling: bool = True  #: the Q-network's head: V + A - mean A (Wang et al., 2016), as Ape-X's (distrl.nn.models.DuelingHead)
    gamma: float = 0.99  #: discount
    eps_base: float = 0.4  #: epsilon ladder base: actor i of N explores with eps_base^(1 + eps_alpha i / (N - 1))
    eps_alpha: float = 7.0  #: epsilon ladder exponent
    capacity: int = 100_000  #: transitions each shard keeps (FIFO beyond)
    min_replay_size: int = 2_000  #: transitions a shard must hold before it serves samples
    alpha: float = 0.6  #: priority exponent: P(i) = p_i^alpha / sum_k p_k^alpha
    beta0: float = 0.4  #: importance-weight exponent at the start, annealed linearly to 1
    beta_anneal_updates: int = 20_000  #: learner updates over which beta reaches 1
    priority_eps: float = 1e-3  #: p_i = |delta_i| + priority_eps
    #: importance weights divided by their max over the batch (keeps the step size as beta grows) or
    #: over every stored item (Schaul et al.'s (N min P)^-beta: steps shrink by the priority spread)
    weight_norm: str = "batch"
    batch_size: int = 128  #: transitions per learner update (split over the shards)
    lr: float = 2.5e-4  #: Adam learning rate (1e-3 reached CartPole's 475 sooner, then collapsed: docs/apex.md)
    #: Adam's epsilon. DQN's (RMSProp 0.01, Rainbow's Adam 0.01 / 32) is large on purpose: once TD
    #: errors are small, a tiny gradient is no longer scaled up to a full lr-sized step
    adam_eps: float = 1e-8
    target_update_interval: int = 500  #: learner updates between target-network copies (K; ~4 s on CartPole here)
    huber_delta: float = 1.0  #: Huber loss threshold
    max_grad_norm: float = 10.0  #: global gradient-norm clip
    samples_per_insert: float = 4.0  #: target sampled/inserted ratio of each shard (0: no rate limit)
    spi_tolerance: float = 20_000.0  #: how far (in sampled items) a shard may drift from that ratio before it holds one side
    insert_queue_size: int = 8  #: insert messages a shard queues before it tells actors to hold
    hold_sleep_s: float = 0.05  #: how long a held actor or learner waits before it tries again
    params_interval_s: float = 0.2  #: how often an actor reports its statistics to the learner (never waiting)
    #: env steps an actor takes between parameter pulls (each rides on a report; 0: every report
    #: pulls): a pull ships the whole net, and this many steps share its bytes
    params_interval_frames: int = 0
    prefetch: bool = True  #: request the next sample before training on the current one
    #: episodes of actors exploring more than this go to their rung's metric only, not to the training
    #: mean behind the stop rule (an eps=0.4 actor's short episodes would hide the policy); the least
    #: exploring actor always counts
    report_max_eps: float = 0.05

    def __post_init__(self):
        for name in ("shards", "local_actors", "envs_per_actor", "unroll_length", "n_step", "capacity",
                     "batch_size", "target_update_interval", "insert_queue_size", "beta_anneal_updates"):
            check(getattr(self, name) >= 1, f"algo.{name} must be >= 1, got {getattr(self, name)}")
        check(self.n_step <= self.unroll_length, f"algo.n_step ({self.n_step}) must be <= algo.unroll_length "
               f"({self.unroll_length})")
        check(0 < self.gamma <= 1, "algo.gamma must be in (0, 1]")
        check(0 < self.eps_base <= 1 and self.eps_alpha >= 0, "algo.eps_base must be in (0, 1], algo.eps_alpha >= 0")
        check(0 <= self.min_replay_size <= self.capacity, "algo.min_replay_size must be in [0, algo.capacity]")
        check(self.alpha >= 0 and 0 <= self.beta0 <= 1, "algo.alpha must be >= 0 and algo.beta0 in [0, 1]")
        check(self.priority_eps > 0, "algo.priority_eps must be > 0")
        check(self.weight_norm in ("batch", "buffer"), f"algo.weight_norm must be batch or buffer, got {self.weight_norm!r}")
        check(self.adam_eps > 0, f"algo.adam_eps must be > 0, got {self.adam_eps}")
        check(self.lr > 0 and self.huber_delta > 0 and self.max_grad_norm > 0,
               "algo.lr, algo.huber_delta and algo.max_grad_norm must be > 0")
        check(self.samples_per_insert >= 0, "algo.samples_per_insert must be >= 0")
        need = self.batch_size + self.samples_per_insert * self.transitions_per_insert
        check(self.samples_per_insert == 0 or 2 * self.spi_tolerance >= need,
               f"algo.spi_tolerance ({self.spi_tolerance:g}) must be at least half of batch_size + samples_per_insert "
               f"* envs_per_actor * unroll_length ({need:g}), or a shard can hold both sides at once")
        check(self.hold_sleep_s > 0 and self.params_interval_s > 0, "algo.hold_sleep_s and algo.params_interval_s must be > 0")
        check(self.params_interval_frames >= 0, f"algo.params_interval_frames must be >= 0, got {self.params_interval_frames}")
        check(0 <= self.report_max_eps <= 1, "algo.report_max_eps must be in [0, 1]")

    @property
    def replay(self) -> ReplayConfig:
        """What each replay shard (ranks 1..R) is built with."""
        return ReplayConfig(capacity=self.capacity, alpha=self.alpha, priority_eps=self.priority_eps,
                            min_size=self.min_replay_size, samples_per_insert=self.samples_per_insert,
                            spi_tolerance=self.spi_tolerance, queue_size=self.insert_queue_size)

    @property
    def transitions_per_insert(self) -> int:
        """Transitions in one actor message (its first message has ``n_step - 1`` fewer)."""
        return self.envs_per_actor * self.unroll_length


def default() -> Config:
    """CartPole-v1: 1 replay shard, 16 envs per actor, 3-step double DQN with a dueling head."""
    # ReLU Q-networks, as DQN; the actor-critic recipes keep tanh.
    return Config(recipe="apex", algo=ApexConfig(), run=RunConfig(env="CartPole-v1"),
                  net=NetConfig(hidden=(128, 128), activation="relu"))


def minatar() -> Config:
    """MinAtar/Breakout-v1 (10x10 images, the minatar encoder), stopping at a greedy score of 10;
    the DQN settings of Young & Tian's MinAtar baselines where they apply (replay 100k, lr 2.5e-4).

    An actor's wire stays within a step's 400-byte observation plus 64 bytes (issue "Pixels I",
    tests/test_apex_wire.py): unrolls of 128 steps send 131 observations for 128 transitions
    (409 bytes a step, 14 more per transition), and a pull of the 528 KB net every 16,000 steps
    costs 33 bytes a step."""
    return override(
        default(),
        **{"run.env": "MinAtar/Breakout-v1", "run.total_frames": 50_000_000, "run.max_time_s": 1200.0,
           "run.target_return": 10.0, "run.eval_episodes": 10, "algo.envs_per_actor": 8, "algo.lr": 2.5e-4,
           "algo.min_replay_size": 5_000, "algo.target_update_interval": 1_000, "algo.batch_size": 64,
           "algo.unroll_length": 128, "algo.params_interval_frames": 16_000},
    )


def atari() -> Config:
    """``ALE/*`` games (Pong by default; the Nature encoder): Ape-X's n = 3, Adam at 6.25e-5 with eps
    1.5e-4 (Hessel et al.'s), a target copy every 2,500 updates, batches of 64; a shard holds 200k
    transitions (each frame stored once, docs/atari.md) and serves from 20k."""
    return override(
        default(),
        **{**ATARI_RUN, "algo.envs_per_actor": 8, "algo.unroll_length": 64, "algo.lr": 6.25e-5,
           "algo.adam_eps": 1.5e-4, "algo.capacity": 200_000, "algo.min_replay_size": 20_000,
           "algo.target_update_interval": 2_500, "algo.batch_size": 64, "algo.params_interval_frames": 16_000},
    )


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{**DEBUG_RUN, "run.total_frames": 12_000, "algo.envs_per_actor": 8, "algo.unroll_length": 10,
           "algo.min_replay_size": 500, "algo.batch_size": 64, "algo.target_update_interval": 50,
           "algo.samples_per_insert": 4.0, "algo.spi_tolerance": 1000.0, "net.hidden": (32,), "algo.lr": 1e-3,
           "algo.gamma": 0.5},  # the toy env is a bandit: a short horizon makes the action gap large
    )


def _check_config(cfg: Config) -> None:
    require_discrete_actions(cfg)


def _roles(world_size: int, cfg: Config) -> list[str]:
    shards = cfg.algo.shards
    return ["learner"] + ["replay"] * shards + ["actor"] * (world_size - 1 - shards)


RECIPE = Recipe(
    name="apex",
    description="Ape-X: epsilon-ladder actors fill a prioritized replay service; a double-DQN learner samples it",
    layout="rank 0 learner, ranks 1..R replay shards (algo.shards), the rest actors",
    min_world_size=3,
    roles_for=lambda n: _roles(n, default()),
    builders={"learner": role("distrl.recipes.apex.learner:ApexLearner"),
              "replay": role("distrl.replay.server:ReplayServer"),
              "actor": role("distrl.recipes.apex.actor:ApexActor")},
    default_config=default,
    local_world_size=lambda cfg: 1 + cfg.algo.shards + cfg.algo.local_actors,
    check_config=_check_config,
    takes_env_factory=True,
    roles_for_config=_roles,
    source_roles=frozenset({"actor"}),
    min_world_size_for=lambda cfg: cfg.algo.shards + 2,
    compare_nproc=4,
    table_row=("Ape-X", "2018", "CPU (inference)", "GPU", "async", "off-policy (DQN)"),
    policy_network="q_network",
)
