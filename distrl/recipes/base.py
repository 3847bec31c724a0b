"""Recipes: the rank-to-role table of one architecture plus its default config.

A recipe holds no training loop. It says which role each rank plays for a given world size,
checks that the world size and config fit before any process group starts (one ``ValueError``
line naming the layout it needs), and names the role classes the runner builds.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Protocol

from distrl.config import Config

if TYPE_CHECKING:  # an annotation only: the command line (--help, --print-config, one-line errors) needs
    from distrl.transport.base import Transport  # no transport, and importing one costs torch and tensordict


@dataclass(frozen=True)
class RoleContext:
    """What a role is given: its config, its endpoint, the rank table, the run directory."""

    cfg: Config
    transport: Optional[Transport]  #: None for "collective" recipes, which use torch.distributed
    rank: int
    roles: Mapping[int, str]  #: rank -> role name, for the whole (possibly in-process) group
    run_dir: Path

    def ranks_of(self, role: str) -> list[int]:
        return [r for r, name in sorted(self.roles.items()) if name == role]


class Role(Protocol):
    """A long-lived object on one rank: serves methods in ``__init__``, owns its loop in ``run``."""

    def run(self) -> Optional[dict]:
        """Run until the job ends; the learner returns the run summary, other roles ``None``."""


RoleFactory = Callable[[RoleContext], Role]


def role(path: str) -> RoleFactory:
    """The builder of role class ``"module:Class"``, imported only when a rank builds it: the CLI
    imports every recipe module to validate a command line, and roles pull in heavy modules. The
    module may be a ``.py`` path (``f"{Path(__file__).parent / 'learner.py'}:Learner"``): a recipe
    outside ``distrl/`` names its own role files so (:mod:`distrl.recipes.files`)."""
    module, _, name = path.rpartition(":")

    def build(ctx: RoleContext) -> Role:
        from distrl.recipes.files import import_target

        return getattr(import_target(module), name)(ctx)

    build.__qualname__ = f"role({path!r})"
    build.target = path  # for tests and error messages: what this builder will import
    return build


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


#: The run settings every recipe's ``atari`` preset shares (``ALE/*`` ids pick it by themselves).
#: Budgets count agent steps (x4 emulator frames). A full-game evaluation of Pong lasts 800-20,000
#: agent steps a game, so it runs every 5 minutes on 4 games rather than every 20 s on 10.
ATARI_RUN = {"run.env": "ALE/Pong-v5", "run.total_frames": 50_000_000, "run.max_time_s": 3600.0,
             "run.eval_episodes": 4, "run.eval_interval_s": 300.0, "run.checkpoint_interval_s": 300.0}


#: gymnasium's MuJoCo ids (``pip install "distrl[mujoco]"``): each recipe's ``mujoco`` preset serves them
#: (``ENV_EXPERIMENTS``), with its own settings tuned on ``InvertedPendulum-v5`` and ``HalfCheetah-v5``.
MUJOCO_ENVS = ("Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5", "InvertedDoublePendulum-v5",
               "InvertedPendulum-v5", "Pusher-v5", "Reacher-v5", "Swimmer-v5", "Walker2d-v5")
#: The run settings every recipe's ``mujoco`` preset shares: HalfCheetah by default, a greedy
#: evaluation of 5 episodes (1,000 steps each) every 30 s, 20 minutes.
MUJOCO_RUN = {"run.env": "HalfCheetah-v5", "run.total_frames": 20_000_000, "run.max_time_s": 1200.0,
              "run.eval_episodes": 5, "run.eval_interval_s": 30.0}


def require_discrete_actions(cfg: Config) -> None:
    """``ValueError`` naming the recipe when ``cfg.run.env`` has continuous actions (Ape-X: a DQN
    whose network ends in Q-values calls it from its config check)."""
    from distrl.envs.gym import env_info

    if env_info(cfg.run.env).num_actions is None:
        raise ValueError(f"{cfg.recipe} is a DQN and acts in discrete action spaces only; {cfg.run.env} is continuous: "
                         "use impala, seed, sf, a3c or vecenv (Gaussian policies)")


def check_action_space(cfg: Config) -> None:
    """The actor-critic recipes' check: discrete or continuous actions from a gymnasium id; a TorchRL
    env factory (``--env module:function``) with discrete actions only (its actors' collector path
    encodes categorical and one-hot actions, not boxes)."""
    from distrl.envs.gym import env_info, is_factory

    if is_factory(cfg.run.env) and env_info(cfg.run.env).num_actions is None:
        raise ValueError(f"{cfg.recipe} takes continuous actions from gymnasium ids only; {cfg.run.env} is a TorchRL "
                         "factory with continuous actions (try the vecenv recipe with algo.env_factory)")
