"""IMPALA's algorithm settings, ``cfg.algo``: the typed fields ``--set algo.NAME=VALUE`` takes, each with its
doc and its checks. The presets and the rank table are in ``recipe.py``."""

from __future__ import annotations

from dataclasses import dataclass

from distrl.config import check


@dataclass(frozen=True)
class ImpalaConfig:
    """IMPALA's algorithm and actor settings."""

    #: envs each actor steps as one vector (B per message): gymnasium's, or the TorchRL factory's
    envs_per_actor: int = 32
    unroll_length: int = 32  #: steps per trajectory (T)
    batch_trajectories: int = 2  #: actor messages per learner batch; frames = this * B * T
    queue_size: int = 8  #: learner's trajectory queue bound, in messages
    put_timeout_s: float = 2.0  #: how long an arriving trajectory may wait for queue space, then dropped
    #: updates between parameter sends to an actor: one whose parameters are fewer updates old gets none
    params_every: int = 1
    local_actors: int = 2  #: actors in the one process at world size 1
    lr: float = 5e-4  #: Adam learning rate
    gamma: float = 0.99  #: discount
    rho_bar: float = 1.0  #: V-trace truncation of the importance weight in the advantage
    c_bar: float = 1.0  #: V-trace truncation of the trace coefficients
    #: rewards are multiplied by this in the loss: values in scaled units the critic reaches sooner
    reward_scale: float = 0.1
    value_coef: float = 0.5  #: weight of the value loss
    entropy_coef: float = 0.01  #: weight of the entropy bonus
    max_grad_norm: float = 1.0  #: global gradient-norm clip
    #: rescale each batch's advantages to unit variance (off: it amplifies noise, docs/impala.md)
    normalize_advantage: bool = False

    def __post_init__(self):
        for name in (
            "envs_per_actor",
            "unroll_length",
            "batch_trajectories",
            "queue_size",
            "local_actors",
            "params_every",
        ):
            check(getattr(self, name) >= 1, f"algo.{name} must be >= 1, got {getattr(self, name)}")
        check(self.lr > 0, "algo.lr must be > 0")
        check(0 < self.gamma <= 1, "algo.gamma must be in (0, 1]")
        check(self.reward_scale > 0, "algo.reward_scale must be > 0")
        check(self.rho_bar > 0 and self.c_bar > 0, "algo.rho_bar and algo.c_bar must be > 0")
        check(self.put_timeout_s > 0, "algo.put_timeout_s must be > 0")

    @property
    def frames_per_batch(self) -> int:
        return self.batch_trajectories * self.envs_per_actor * self.unroll_length
