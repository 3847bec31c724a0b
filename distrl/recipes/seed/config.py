"""SEED RL's algorithm settings, ``cfg.algo``: the typed fields ``--set algo.NAME=VALUE`` takes, each with its
doc and its checks. The presets and the rank table are in ``recipe.py``."""

from __future__ import annotations

from dataclasses import dataclass

from distrl.config import check


CORES = ("mlp", "lstm")


@dataclass(frozen=True)
class SeedConfig:
    """SEED's algorithm, inference-server and env-worker settings."""

    envs_per_worker: int = 256  #: gymnasium envs each env worker steps, split into groups
    groups_per_worker: int = 2  #: env groups per worker, stepped in turn while the others' requests are in flight
    local_workers: int = 2  #: env workers in the one process at world size 1
    unroll_length: int = 16  #: steps per trajectory chunk (T)
    batch_size: int = 128  #: env trajectories ([T] rows, cut from chunks) per learner update
    queue_size: int = 2  #: learner's chunk queue bound; small keeps policy lag near 0
    put_timeout_s: float = 2.0  #: how long inference waits for queue space (workers wait too), then drops the chunk
    max_batch_envs: int = 512  #: an inference batch closes once it holds this many observations...
    max_wait_ms: float = 0.5  #: ...or this long after its first request arrived, whichever comes first
    request_timeout_s: float = 10.0  #: bound on a request handler's wait for its batch; below the call timeout
    learner_threads: int = 2  #: torch threads of rank 0, which does all inference and learning (see docs/seed.md)
    core: str = "mlp"  #: policy core: mlp (ActorCritic) or lstm (RecurrentActorCritic, state kept on the server)
    core_size: int = 64  #: LSTM hidden size when core=lstm
    lr: float = 3e-4  #: Adam learning rate (5e-4 dipped to 100 after 475 in one seed of 20, 1e-3 in one of two)
    gamma: float = 0.99  #: discount
    rho_bar: float = 1.0  #: V-trace truncation of the importance weight in the advantage
    c_bar: float = 1.0  #: V-trace truncation of the trace coefficients
    #: rewards are multiplied by this in the loss: values in scaled units the critic reaches sooner
    reward_scale: float = 0.1
    value_coef: float = 0.5  #: weight of the value loss
    entropy_coef: float = 0.003  #: weight of the entropy bonus (lower than impala's: see docs/seed.md)
    max_grad_norm: float = 1.0  #: gradient-norm clip (global; per tower for the LSTM core)
    normalize_advantage: bool = False  #: rescale each batch's advantages to unit variance (impala's option)

    def __post_init__(self):
        for name in (
            "envs_per_worker",
            "groups_per_worker",
            "local_workers",
            "unroll_length",
            "batch_size",
            "queue_size",
            "max_batch_envs",
            "core_size",
            "learner_threads",
        ):
            check(getattr(self, name) >= 1, f"algo.{name} must be >= 1, got {getattr(self, name)}")
        check(
            self.envs_per_worker % self.groups_per_worker == 0,
            f"algo.envs_per_worker ({self.envs_per_worker}) must be a multiple of algo.groups_per_worker "
            f"({self.groups_per_worker})",
        )
        check(self.max_wait_ms >= 0, "algo.max_wait_ms must be >= 0")
        check(self.put_timeout_s > 0 and self.request_timeout_s > 0, "algo timeouts must be > 0")
        check(self.core in CORES, f"algo.core must be one of {CORES}, got {self.core!r}")
        check(self.lr > 0, "algo.lr must be > 0")
        check(0 < self.gamma <= 1, "algo.gamma must be in (0, 1]")
        check(self.reward_scale > 0, "algo.reward_scale must be > 0")
        check(self.rho_bar > 0 and self.c_bar > 0, "algo.rho_bar and algo.c_bar must be > 0")

    @property
    def envs_per_group(self) -> int:
        """Observations per request (B of one chunk)."""
        return self.envs_per_worker // self.groups_per_worker

    @property
    def frames_per_batch(self) -> int:
        return self.batch_size * self.unroll_length
