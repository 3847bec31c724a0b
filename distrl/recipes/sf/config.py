"""Sample Factory's algorithm settings, ``cfg.algo``: the typed fields ``--set algo.NAME=VALUE`` takes, each with its
doc and its checks. The presets and the rank table are in ``recipe.py``."""

from __future__ import annotations

from dataclasses import dataclass

from distrl.config import check


@dataclass(frozen=True)
class SFConfig:
    """Sample Factory's rollout, inference and APPO settings."""

    envs_per_worker: int = 256  #: gymnasium envs each rollout worker steps, split into groups (docs/sf.md, tuning)
    groups_per_worker: int = 2  #: env groups stepped in turn (2: double buffering)
    inference_ranks: int = 1  #: inference (policy worker) ranks, 1..R; rollout workers are spread over them
    local_workers: int = 2  #: rollout workers in the one process at world size 1
    unroll_length: int = 32  #: steps per trajectory slot (T)
    slots_per_group: int = 2  #: trajectory slots per env group in the pool (filling + spare); more: more lag
    batch_size: int = 64  #: env trajectories ([T] rows) per learner update
    max_policy_lag: int = 20  #: rows whose oldest step is more updates old than this are dropped (counted)
    max_batch_envs: int = 1024  #: an inference batch closes once it holds this many observations...
    max_wait_ms: float = 0.5  #: ...or this long after its first request arrived
    #: how long a rollout worker waits for one request's actions; below the call timeout
    request_timeout_s: float = 10.0
    #: how long a worker waits for a free slot before it pings the learner (and waits on if it answers)
    slot_timeout_s: float = 10.0
    lr: float = 5e-4  #: Adam learning rate (impala's and seed's)
    gamma: float = 0.99  #: discount
    vtrace: bool = True  #: V-trace value targets (off: GAE on the lagged data)
    gae_lambda: float = 0.95  #: GAE lambda when vtrace is off
    rho_bar: float = 1.0  #: V-trace truncation of the importance weight
    c_bar: float = 1.0  #: V-trace truncation of the trace coefficients
    clip_eps: float = 0.2  #: PPO's ratio clip
    reward_scale: float = 0.1  #: rewards are multiplied by this in the loss (as impala and seed)
    value_coef: float = 0.5  #: weight of the value loss
    entropy_coef: float = 0.003  #: weight of the entropy bonus
    max_grad_norm: float = 1.0  #: gradient-norm clip, per tower (clip_towers)
    normalize_advantage: bool = False  #: rescale each batch's advantages to unit variance (off: raw, as impala)
    num_epochs: int = 1  #: passes over each batch (Sample Factory's num_epochs; 1: one step per batch, APPO)
    num_minibatches: int = 1  #: steps per pass, each on a shuffled share of the batch's rows (or samples)
    #: what a minibatch is cut from: ``rows`` (whole [T] rows, advantages under each minibatch's critic)
    #: or ``samples`` (GAE once per batch, then single samples shuffled across it: PPO's; needs vtrace off)
    minibatch: str = "rows"
    #: decoupled PPO (Hilton et al., 2021): the ratio clipped against the network as each batch arrives,
    #: the lag corrected by a weight pi_prox / mu truncated at ``rho_bar`` (needs ``minibatch=samples``)
    decoupled: bool = False
    learner_threads: int = 1  #: torch threads of the learner's process (at world size > 1)
    #: cores for the learner alone at world size > 1, every other rank on the rest (0: no pinning)
    learner_cores: int = 0

    def __post_init__(self):
        for name in (
            "envs_per_worker",
            "groups_per_worker",
            "inference_ranks",
            "local_workers",
            "unroll_length",
            "slots_per_group",
            "batch_size",
            "max_batch_envs",
            "num_epochs",
            "num_minibatches",
        ):
            check(getattr(self, name) >= 1, f"algo.{name} must be >= 1, got {getattr(self, name)}")
        check(
            self.envs_per_worker % self.groups_per_worker == 0,
            f"algo.envs_per_worker ({self.envs_per_worker}) must be a multiple of algo.groups_per_worker "
            f"({self.groups_per_worker})",
        )
        check(
            self.num_minibatches <= self.batch_size,
            f"algo.num_minibatches ({self.num_minibatches}) must be <= algo.batch_size ({self.batch_size}): "
            "a minibatch holds whole rows",
        )
        check(self.minibatch in ("rows", "samples"), f"algo.minibatch must be rows or samples, got {self.minibatch!r}")
        check(
            self.minibatch == "rows" or not self.vtrace,
            "algo.minibatch=samples computes GAE once per batch: set algo.vtrace=false (V-trace needs whole rows)",
        )
        check(
            self.minibatch == "samples" or not self.decoupled,
            "algo.decoupled takes the proximal policy once per batch: set algo.minibatch=samples",
        )
        check(self.slots_per_group >= 2, "algo.slots_per_group must be >= 2 (one filling, one spare)")
        for name in ("max_policy_lag", "learner_cores", "max_wait_ms"):
            check(getattr(self, name) >= 0, f"algo.{name} must be >= 0, got {getattr(self, name)}")
        check(self.request_timeout_s > 0 and self.slot_timeout_s > 0, "algo timeouts must be > 0")
        check(self.lr > 0 and 0 < self.gamma <= 1, "algo.lr must be > 0 and algo.gamma in (0, 1]")
        check(0 <= self.gae_lambda <= 1 and self.clip_eps > 0, "algo.gae_lambda in [0, 1], algo.clip_eps > 0")
        check(
            self.reward_scale > 0 and self.rho_bar > 0 and self.c_bar > 0,
            "algo.reward_scale, algo.rho_bar and algo.c_bar must be > 0",
        )

    @property
    def envs_per_group(self) -> int:
        """Envs per group, and rows per slot (B)."""
        return self.envs_per_worker // self.groups_per_worker
