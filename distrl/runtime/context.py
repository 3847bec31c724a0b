"""What a role is given and what a recipe is, as data: :class:`RoleContext` and :class:`Recipe`.

They live here, below the recipes, because every lower layer receives them (the learner session, the
replay service, the trackers): the runner resolves the recipe once and hands it to each role in its
context, so nothing below ``recipes/`` looks a recipe up by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Protocol

from distrl.config import Config

if TYPE_CHECKING:  # annotations only: the command line (--help, --print-config, one-line errors) needs
    from distrl.envs.info import EnvInfo  # no transport, and importing one costs torch and tensordict
    from distrl.transport.base import Transport


@dataclass(frozen=True)
class Recipe:
    """One architecture as data. ``roles_for(world_size)`` lists each rank's role."""

    name: str
    description: str  #: one line for ``--help``
    layout: str  #: the rank table in words, quoted by errors
    min_world_size: int  #: smallest torchrun world size that fills every role (1 is always allowed: local)
    roles_for: Callable[[int], list[str]]
    builders: Mapping[str, RoleFactory]
    default_config: Callable[[], Config]
    local_world_size: Callable[[Config], int]  #: in-process ranks when launched at world size 1
    check_config: Callable[[Config], None] = lambda cfg: None  #: recipe-specific checks (env type...)
    #: how ranks talk: "rpc" (roles call each other through the transport) or "collective"
    #: (every rank runs the same loop and all-reduces, torch.distributed's default process group)
    group: str = "rpc"
    #: roles the job cannot go on without: if one dies the job stops (or torchrun restarts it);
    #: any other role that dies is logged and the job goes on without it
    critical_roles: frozenset = frozenset({"learner"})
    #: roles whose ranks make the learner's experience: when every one of them is lost (for
    #: ``run.peer_grace_s``) the learner stops with ``all_peers_lost``, though ranks of other roles
    #: (SF's inference, Ape-X's replay shards) live on; empty: every other rank
    source_roles: frozenset = frozenset()
    #: for a rank table that depends on the config (apex's replay shard count): replaces
    #: ``roles_for`` and ``min_world_size`` when set
    roles_for_config: Optional[Callable[[int, Config], list[str]]] = None
    min_world_size_for: Optional[Callable[[Config], int]] = None
    #: whether ``--env module:function`` (a user's TorchRL env) works: actors that act locally collect
    #: through TorchRL's Collector, policy-free env workers step it as a vector env (torchrl_vector.py)
    takes_env_factory: bool = False
    #: whether its loss reads the critic in the standardised units ``net.value_norm=on`` gives it
    takes_value_norm: bool = False
    #: processes ``distrl compare`` gives it unless ``--nproc`` says (the layout the README's CartPole
    #: comparison measures); 0: ``max(4, min_world_size)``
    compare_nproc: int = 0
    #: its row of the seed's comparison table (``distrl compare``'s report): architecture, year, where the
    #: actors' inference runs, the learner's device, sync or async, what it suits; empty: its name and dashes
    table_row: tuple[str, ...] = ()
    #: the network ``load_policy`` rebuilds from its checkpoint: ``"actor_critic"`` (``ActorCritic``: logits,
    #: or a Gaussian's mean and std) or ``"q_network"`` (``QNetwork``: Q-values, acted on greedily)
    policy_network: str = "actor_critic"
    #: config fields (dotted) that a ``--resume`` may not change besides the network's: what its
    #: checkpoint's state is shaped by (Ape-X's shard count: one saved replay a shard)
    fixed_on_resume: tuple[str, ...] = ()

    def rank_table(self, world_size: int, cfg: Config) -> dict[int, str]:
        """Rank -> role for a launch of ``world_size`` processes (1 means one process, local)."""
        if world_size < 1:
            raise ValueError(f"world size must be >= 1, got {world_size}")
        need = self.min_world_size_for(cfg) if self.min_world_size_for else self.min_world_size
        if world_size == 1:
            world_size = self.local_world_size(cfg)
        elif world_size < need:
            raise ValueError(
                f"recipe {self.name!r} cannot run on {world_size} processes: it needs {self.layout} "
                f"(world size 1, or at least {need})"
            )
        roles = self.roles_for_config(world_size, cfg) if self.roles_for_config else self.roles_for(world_size)
        unknown = sorted(set(roles) - set(self.builders))
        if unknown:
            raise ValueError(f"recipe {self.name!r} names roles it cannot build: {unknown}")
        return dict(enumerate(roles))


@dataclass(frozen=True)
class RoleContext:
    """What a role is given: its config, its endpoint, the rank table, the run directory."""

    cfg: Config
    transport: Optional[Transport]  #: None for "collective" recipes, which use torch.distributed
    rank: int
    roles: Mapping[int, str]  #: rank -> role name, for the whole (possibly in-process) group
    run_dir: Path
    #: the recipe resolved once by the runner (its name, source roles...); lower layers read it here
    #: instead of looking the recipe up again. ``None`` where a test or a TorchRL user builds a role alone.
    recipe: Optional[Recipe] = None
    #: ``--env`` resolved once by the plan (:func:`distrl.envs.gym.env_info`: kind, spaces, backend); ``None``
    #: for an id only a user's factory knows (vecenv's ``algo.env_factory``) or a role built alone
    env: Optional[EnvInfo] = None

    @property
    def recipe_name(self) -> str:
        """The short name progress lines and W&B show (``seed_apex``, not ``/abs/path/seed_apex.py:recipe``)."""
        return self.recipe.name if self.recipe is not None else str(self.cfg.recipe)

    def ranks_of(self, role: str) -> list[int]:
        return [r for r, name in sorted(self.roles.items()) if name == role]


class Role(Protocol):
    """A long-lived object on one rank: serves methods in ``__init__``, owns its loop in ``run``."""

    def run(self) -> Optional[dict]:
        """Run until the job ends; the learner returns the run summary, other roles ``None``."""


RoleFactory = Callable[[RoleContext], Role]
