"""A3C's algorithm settings, ``cfg.algo``: the typed fields ``--set algo.NAME=VALUE`` takes, each with its
doc and its checks. The presets and the rank table are in ``recipe.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from distrl.config import check


OPTIMIZERS = ("rmsprop", "adam")
WIRE_DTYPES = ("float32", "bfloat16")  #: names of ``torch`` dtypes (this module does not import torch)


@dataclass(frozen=True)
class A3CConfig:
    """A3C's algorithm, worker and parameter-server settings."""

    envs_per_worker: int = 32  #: gymnasium envs each worker steps as one vector (B per gradient)
    t_max: int = 32  #: steps per env between gradients (the paper's t_max; frames per push = B * t_max)
    local_workers: int = 2  #: workers in the one process at world size 1
    sync: bool = False  #: A2C: apply the mean of one gradient per live worker, all from the same version
    max_staleness: Optional[int] = None  #: drop (and count) gradients older than this many updates; None keeps all
    queue_size: int = 16  #: the server's gradient queue bound, in gradients
    put_timeout_s: float = 2.0  #: how long an arriving gradient may wait for queue space, then dropped
    sync_poll_s: float = 0.002  #: A2C: a worker's pause between asks for the next version
    optimizer: str = "rmsprop"  #: the server's optimizer, one state for every worker: rmsprop (the paper's) or adam
    lr: float = 7e-4  #: learning rate
    rmsprop_alpha: float = 0.99  #: RMSProp's decay of the squared-gradient average (the paper's alpha)
    #: epsilon of the optimizer's denominator; above a converged gradient's RMS, so noise gets small steps (docs/a3c.md)
    optim_eps: float = 1e-3
    gamma: float = 0.99  #: discount
    reward_scale: float = 0.1  #: rewards are multiplied by this in the loss (values in scaled units, as impala)
    value_coef: float = 0.5  #: weight of the value loss
    #: weight of the entropy bonus (the paper's beta); small, as rewards are scaled by 0.1 (docs/a3c.md)
    entropy_coef: float = 0.001
    max_grad_norm: float = 0.5  #: norm clip of each applied gradient, per tower (policy, value), after A2C's mean
    normalize_advantage: bool = False  #: rescale each segment batch's advantages to unit variance
    #: dtype of gradients and parameters on the wire: float32 or bfloat16 (the server keeps and updates float32)
    wire_dtype: str = "float32"

    def __post_init__(self):
        for name in ("envs_per_worker", "t_max", "local_workers", "queue_size"):
            check(getattr(self, name) >= 1, f"algo.{name} must be >= 1, got {getattr(self, name)}")
        check(
            self.max_staleness is None or self.max_staleness >= 0,
            f"algo.max_staleness must be >= 0 or none, got {self.max_staleness}",
        )
        check(self.wire_dtype in WIRE_DTYPES, f"algo.wire_dtype must be one of {WIRE_DTYPES}, got {self.wire_dtype!r}")
        check(self.optimizer in OPTIMIZERS, f"algo.optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        check(self.lr > 0, "algo.lr must be > 0")
        check(0 < self.rmsprop_alpha < 1, "algo.rmsprop_alpha must be in (0, 1)")
        check(self.optim_eps > 0, "algo.optim_eps must be > 0")
        check(0 < self.gamma <= 1, "algo.gamma must be in (0, 1]")
        check(self.reward_scale > 0, "algo.reward_scale must be > 0")
        check(self.value_coef >= 0 and self.entropy_coef >= 0, "algo.value_coef and algo.entropy_coef must be >= 0")
        check(self.max_grad_norm > 0, "algo.max_grad_norm must be > 0")
        check(self.put_timeout_s > 0 and self.sync_poll_s > 0, "algo.put_timeout_s and algo.sync_poll_s must be > 0")
