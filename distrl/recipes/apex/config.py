"""Ape-X's algorithm settings, ``cfg.algo``: the typed fields ``--set algo.NAME=VALUE`` takes, each with its
doc and its checks. The presets and the rank table are in ``recipe.py``."""

from __future__ import annotations

from dataclasses import dataclass

from distrl.config import check
from distrl.replay.config import ReplayConfig


#: ``algo.learner``'s values
LEARNERS = ("auto", "dqn", "sac")


def learner_kind(cfg) -> str:
    """``"dqn"`` or ``"sac"``: what ``algo.learner`` picks for ``cfg.run.env`` (``auto``: SAC for continuous
    actions). A function of the config, not a field filled in at run time (every rank computes the same)."""
    from distrl.envs.gym import env_info  # here, not at the top: gymnasium loads only when an env is asked about

    if cfg.algo.learner != "auto":
        return cfg.algo.learner
    return "sac" if env_info(cfg.run.env).num_actions is None else "dqn"


@dataclass(frozen=True)
class ApexConfig:
    """Ape-X's actor, replay and learner settings."""

    #: what learns: ``auto`` (a ``Box`` action space gets SAC, a discrete one double DQN), ``dqn`` or ``sac``
    learner: str = "auto"
    shards: int = 1  #: replay shards R (ranks 1..R); the learner samples each in proportion to its total priority
    local_actors: int = 2  #: actors in the one process at world size 1
    envs_per_actor: int = 16  #: gymnasium envs each actor steps as one vector
    unroll_length: int = 16  #: steps per insert message (T); each message carries about B * T transitions
    n_step: int = 3  #: steps of reward in a transition's return before it bootstraps
    #: the Q-network's head: V + A - mean A (Wang et al., 2016), as Ape-X's (distrl.nn.models.DuelingHead)
    dueling: bool = True
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
    #: how far (in sampled items) a shard may drift from that ratio before it holds one side
    spi_tolerance: float = 20_000.0
    insert_queue_size: int = 8  #: insert messages a shard queues before it tells actors to hold
    #: seconds a replay shard goes without a word from the learner (a call, its pings) before it pings
    #: the learner; it leaves once the learner is gone, not while it is busy or paused (ReplayConfig.idle_s)
    shard_idle_s: float = 60.0
    hold_sleep_s: float = 0.05  #: how long a held actor or learner waits before it tries again
    params_interval_s: float = 0.2  #: how often an actor reports its statistics to the learner (never waiting)
    #: env steps an actor takes between parameter pulls (each rides on a report; 0: every report
    #: pulls): a pull ships the whole net, and this many steps share its bytes
    params_interval_frames: int = 0
    prefetch: bool = True  #: request the next sample before training on the current one
    #: SAC: env steps (all actors together, split evenly) played with uniform random actions before
    #: the actors' policies act (CleanRL's and SB3's ``learning_starts`` steps are random too); none again on resume
    random_steps: int = 0
    tau: float = 0.005  #: SAC: Polyak rate of the target critics, theta' <- tau theta + (1 - tau) theta'
    init_temperature: float = 1.0  #: SAC: the entropy temperature alpha at the start (tuned toward entropy -|A|)
    #: SAC: a ``LayerNorm`` after each hidden ``Linear`` of the twin critics only (``net.layer_norm`` puts
    #: one in the policy too): DroQ's and RLPD's critics
    critic_layer_norm: bool = False
    #: episodes of actors exploring more than this go to their rung's metric only, not to the training
    #: mean behind the stop rule (an eps=0.4 actor's short episodes would hide the policy); the least
    #: exploring actor always counts
    report_max_eps: float = 0.05

    def __post_init__(self):
        for name in (
            "shards",
            "local_actors",
            "envs_per_actor",
            "unroll_length",
            "n_step",
            "capacity",
            "batch_size",
            "target_update_interval",
            "insert_queue_size",
            "beta_anneal_updates",
        ):
            check(getattr(self, name) >= 1, f"algo.{name} must be >= 1, got {getattr(self, name)}")
        check(
            self.n_step <= self.unroll_length,
            f"algo.n_step ({self.n_step}) must be <= algo.unroll_length ({self.unroll_length})",
        )
        check(0 < self.gamma <= 1, "algo.gamma must be in (0, 1]")
        check(0 < self.eps_base <= 1 and self.eps_alpha >= 0, "algo.eps_base must be in (0, 1], algo.eps_alpha >= 0")
        check(0 <= self.min_replay_size <= self.capacity, "algo.min_replay_size must be in [0, algo.capacity]")
        check(self.alpha >= 0 and 0 <= self.beta0 <= 1, "algo.alpha must be >= 0 and algo.beta0 in [0, 1]")
        check(self.priority_eps > 0, "algo.priority_eps must be > 0")
        check(
            self.weight_norm in ("batch", "buffer"),
            f"algo.weight_norm must be batch or buffer, got {self.weight_norm!r}",
        )
        check(self.adam_eps > 0, f"algo.adam_eps must be > 0, got {self.adam_eps}")
        check(
            self.lr > 0 and self.huber_delta > 0 and self.max_grad_norm > 0,
            "algo.lr, algo.huber_delta and algo.max_grad_norm must be > 0",
        )
        check(self.samples_per_insert >= 0, "algo.samples_per_insert must be >= 0")
        need = self.batch_size + self.samples_per_insert * self.transitions_per_insert
        check(
            self.samples_per_insert == 0 or 2 * self.spi_tolerance >= need,
            f"algo.spi_tolerance ({self.spi_tolerance:g}) must be at least half of batch_size + samples_per_insert "
            f"* envs_per_actor * unroll_length ({need:g}), or a shard can hold both sides at once",
        )
        check(
            self.hold_sleep_s > 0 and self.params_interval_s > 0,
            "algo.hold_sleep_s and algo.params_interval_s must be > 0",
        )
        check(
            self.params_interval_frames >= 0,
            f"algo.params_interval_frames must be >= 0, got {self.params_interval_frames}",
        )
        check(0 <= self.report_max_eps <= 1, "algo.report_max_eps must be in [0, 1]")
        check(self.learner in LEARNERS, f"algo.learner must be one of {LEARNERS}, got {self.learner!r}")
        check(self.random_steps >= 0, f"algo.random_steps must be >= 0, got {self.random_steps}")
        check(self.shard_idle_s > 0, f"algo.shard_idle_s must be > 0, got {self.shard_idle_s}")
        check(0 < self.tau <= 1, f"algo.tau must be in (0, 1], got {self.tau}")
        check(self.init_temperature > 0, f"algo.init_temperature must be > 0, got {self.init_temperature}")

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
            idle_s=self.shard_idle_s,
        )

    @property
    def transitions_per_insert(self) -> int:
        """Transitions in one actor message (its first message has ``n_step - 1`` fewer)."""
        return self.envs_per_actor * self.unroll_length
