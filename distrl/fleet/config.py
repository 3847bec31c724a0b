"""What a :class:`distrl.FleetCollector` is built from: :class:`FleetConfig`, and the policy
network's shape shared by the user's TorchRL policy and the actors (:func:`linear_layers`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import nn

from distrl.config import Config, NetConfig, RunConfig, TransportConfig, check
from distrl.data import keys
from distrl.envs.gym import check_env_id, env_info
from distrl.nn.models import ACTIVATIONS

RECIPES = ("impala",)  #: recipes whose actors a fleet can run (their actor speaks put_trajectory)


@dataclass(frozen=True)
class FleetConfig:
    """A fleet of distrl actors feeding a user's loop; checked when built (``ValueError``)."""

    env: str = "CartPole-v1"  #: gymnasium id every actor steps (discrete actions)
    recipe: str = "impala"  #: whose actor role collects (its actors are started unchanged)
    #: 1: actors are threads of this process (local transport); N > 1: N - 1 actor processes over rpc, this process
    #: rank 0
    world_size: int = 1
    actors: int = 2  #: actor threads at world size 1 (at world size N there are N - 1)
    envs_per_actor: int = 16  #: envs each actor steps as one vector (rows of one message)
    unroll_length: int = 32  #: steps per trajectory (T of every batch)
    frames_per_batch: int = 0  #: frames of one batch, a multiple of envs_per_actor * unroll_length; 0: one message
    total_frames: int = -1  #: iteration ends once this many frames were yielded (whole batches); -1: never
    queue_size: int = 4  #: bound of the trajectory queue, in messages (queued data was collected by older weights)
    #: how long an actor's message waits for queue space (the actor with it), then is dropped
    put_timeout_s: float = 10.0
    batch_timeout_s: float = 60.0  #: longest wait for the next message before iteration fails
    seed: int = 0  #: actor r's envs and sampling are seeded from seed + 1000 r (impala's rule)
    #: hidden widths of the actors' policy MLP (the user's policy network matches it)
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"  #: its activation: tanh (TorchRL MLP's default), relu or elu
    call_timeout_s: float = 30.0  #: bound on every transport call; must exceed put_timeout_s
    init_timeout_s: float = 60.0  #: bound on the actor processes joining (world size > 1)
    torch_threads: int = 1  #: torch threads of each actor process (world size > 1)

    def __post_init__(self):
        check(self.recipe in RECIPES, f"FleetCollector runs the actors of {RECIPES}, not recipe {self.recipe!r}")
        check_env_id(self.env)
        check(self.world_size >= 1, f"world_size must be >= 1, got {self.world_size}")
        for name in ("actors", "envs_per_actor", "unroll_length", "queue_size", "torch_threads"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        check(
            self.frames_per_batch >= 0 and self.frames_per_batch % self.message_frames == 0,
            f"frames_per_batch={self.frames_per_batch} must be a multiple of envs_per_actor * unroll_length = "
            f"{self.message_frames} (whole actor messages), or 0 for one message",
        )
        check(
            self.total_frames == -1 or self.total_frames > 0, f"total_frames must be > 0 or -1, got {self.total_frames}"
        )
        check(
            0 < self.put_timeout_s < self.call_timeout_s,
            f"put_timeout_s={self.put_timeout_s:g} must be > 0 and below call_timeout_s={self.call_timeout_s:g} "
            "(else an actor's call times out while its message waits, and the actor ends)",
        )
        check(self.batch_timeout_s > 0 and self.init_timeout_s > 0, "batch_timeout_s and init_timeout_s must be > 0")
        NetConfig(hidden=tuple(self.hidden), activation=self.activation)  # its checks
        check(self.num_actions is not None, f"FleetCollector's actors need discrete actions; {self.env} is continuous")

    @property
    def message_frames(self) -> int:
        """Frames of one actor message: ``envs_per_actor * unroll_length``."""
        return self.envs_per_actor * self.unroll_length

    @property
    def batch_frames(self) -> int:
        """Frames of one yielded batch."""
        return self.frames_per_batch or self.message_frames

    @property
    def actor_count(self) -> int:
        return self.actors if self.world_size == 1 else self.world_size - 1

    @cached_property
    def _info(self):
        return env_info(self.env)

    @property
    def obs_dim(self) -> int:
        return self._info.obs_dim

    @property
    def num_actions(self):
        return self._info.num_actions

    def recipe_config(self) -> Config:
        """The ``impala`` config the actors are built with (their part of it: env, seed, vector
        shape, network, transport)."""
        from distrl.recipes.impala.recipe import ImpalaConfig

        algo = ImpalaConfig(
            envs_per_actor=self.envs_per_actor,
            unroll_length=self.unroll_length,
            queue_size=self.queue_size,
            put_timeout_s=self.put_timeout_s,
            local_actors=self.actor_count,
        )
        return Config(
            recipe=self.recipe,
            algo=algo,
            run=RunConfig(env=self.env, seed=self.seed, logger="none", torch_threads=self.torch_threads),
            transport=TransportConfig(
                backend="local" if self.world_size == 1 else "rpc",
                call_timeout_s=self.call_timeout_s,
                init_timeout_s=self.init_timeout_s,
            ),
            net=NetConfig(hidden=tuple(self.hidden), activation=self.activation),
        )


def fleet_policy(network: nn.Module, num_actions: int) -> nn.Module:
    """A TorchRL ``ProbabilisticActor`` over a copy of ``network`` (``obs [*B, F] -> logits [*B, A]``):
    reads ``observation``, writes ``logits``, ``action [*B]`` (indices, as the actors' batches hold
    them) and ``action_log_prob [*B]``."""
    from tensordict.nn import TensorDictModule
    from torchrl.data import Categorical
    from torchrl.modules import ProbabilisticActor

    module = TensorDictModule(copy.deepcopy(network), in_keys=[keys.OBSERVATION], out_keys=[keys.LOGITS])
    return ProbabilisticActor(
        module,
        in_keys=[keys.LOGITS],
        spec=Categorical(num_actions),
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


def _leaves(module: nn.Module) -> list[nn.Module]:
    return [m for m in module.modules() if not list(m.children())]


def linear_layers(module: nn.Module, reference: nn.Module) -> list[nn.Linear]:
    """The ``nn.Linear`` layers of ``module`` in order, checked to form ``reference``'s MLP: the
    same layers and activations, and no other layer with parameters (its weights would not reach
    the actors). ``ValueError`` naming both shapes otherwise."""
    kinds = (nn.Linear, nn.Tanh, *ACTIVATIONS.values())  # a user's nn.Tanh is distrl's Tanh's base

    def describe(m: nn.Module) -> str:
        if isinstance(m, nn.Linear):
            return f"Linear({m.in_features}, {m.out_features}{'' if m.bias is not None else ', bias=False'})"
        return type(m).__name__

    want = [describe(m) for m in _leaves(reference) if isinstance(m, kinds)]
    got, extra = [], []
    for m in _leaves(module):
        if isinstance(m, kinds):
            got.append(describe(m))
        elif any(True for _ in m.parameters(recurse=False)):
            extra.append(type(m).__name__)
    if got != want or extra:
        raise ValueError(
            f"the policy's network must be the actors' MLP {' '.join(want)}; it has {' '.join(got)}"
            + (f" and parameters in {extra}" if extra else "")
            + " (set hidden=... and activation=... to the network's, or pass policy=None)"
        )
    return [m for m in _leaves(module) if isinstance(m, nn.Linear)]
