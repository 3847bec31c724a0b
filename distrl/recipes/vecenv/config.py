"""vecenv's algorithm settings, ``cfg.algo``: the typed fields ``--set algo.NAME=VALUE`` takes, each with its
doc and its checks. The presets and the rank table are in ``recipe.py``."""

from __future__ import annotations

from dataclasses import dataclass

from distrl.config import check
from distrl.data import keys


ALLREDUCE_DTYPES = ("float32", "bfloat16")  #: names of ``torch`` dtypes (this module does not import torch)


@dataclass(frozen=True)
class VecEnvConfig:
    """PPO and env-batch settings of the vecenv recipe (per rank)."""

    num_envs: int = 1024  #: envs each rank steps as one batch (B)
    rollout_length: int = 8  #: steps per env between updates (T); a rank's batch is B * T samples
    epochs: int = 4  #: passes over each rollout batch
    num_minibatches: int = 4  #: minibatches per pass; each is B * T / num_minibatches samples
    lr: float = 2e-3  #: Adam learning rate
    anneal_lr: bool = False  #: decay the learning rate linearly to 0 at run.total_frames
    gamma: float = 0.99  #: discount
    gae_lambda: float = 0.95  #: GAE's lambda (bias-variance trade-off of the advantage)
    clip_eps: float = 0.2  #: PPO's ratio clip epsilon
    value_coef: float = 0.5  #: weight of the value loss
    entropy_coef: float = 0.0  #: weight of the entropy bonus
    max_grad_norm: float = 0.5  #: global gradient-norm clip, applied after the all-reduce
    #: clip the value loss as PPO's reference code does: the new value within clip_eps of the rollout's
    clip_value: bool = False
    #: normalise advantages per minibatch on each rank (gymnax-blines, CleanRL), not over every rank's rollout
    minibatch_adv_norm: bool = False
    allreduce_dtype: str = "float32"  #: dtype gradients are all-reduced in: float32, or bfloat16 (half the bytes)
    reward_scale: float = 1.0  #: rewards are multiplied by this before GAE (Pendulum's costs want ~0.1)
    env_factory: str = ""  #: "module:function" building a batched TorchRL env; empty: the torch-native suite
    obs_key: str = keys.OBSERVATION  #: observation key of a factory-built TorchRL env
    #: torch.compile the policy's sampling and a torch-native classic-control env's dynamics (MinAtar's stay eager)
    compile: bool = False

    def __post_init__(self):
        for name in ("num_envs", "rollout_length", "epochs", "num_minibatches"):
            check(getattr(self, name) >= 1, f"algo.{name} must be >= 1, got {getattr(self, name)}")
        check(
            self.frames_per_rank % self.num_minibatches == 0,
            f"algo.num_minibatches ({self.num_minibatches}) must divide num_envs * rollout_length "
            f"({self.frames_per_rank})",
        )
        check(self.lr > 0, "algo.lr must be > 0")
        check(0 < self.gamma <= 1, "algo.gamma must be in (0, 1]")
        check(0 <= self.gae_lambda <= 1, "algo.gae_lambda must be in [0, 1]")
        check(0 < self.clip_eps < 1, "algo.clip_eps must be in (0, 1)")
        check(self.value_coef >= 0 and self.entropy_coef >= 0, "algo.value_coef and algo.entropy_coef must be >= 0")
        check(self.max_grad_norm > 0, "algo.max_grad_norm must be > 0")
        check(self.reward_scale > 0, "algo.reward_scale must be > 0")
        check(
            self.allreduce_dtype in ALLREDUCE_DTYPES,
            f"algo.allreduce_dtype must be one of {ALLREDUCE_DTYPES}, got {self.allreduce_dtype!r}",
        )
        check(
            self.env_factory == "" or ":" in self.env_factory,
            f"algo.env_factory must be 'module:function', got {self.env_factory!r}",
        )

    @property
    def frames_per_rank(self) -> int:
        """Samples each rank collects per update: ``B * T``."""
        return self.num_envs * self.rollout_length
