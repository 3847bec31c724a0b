"""What recipes build with: :func:`role` (a role class imported only on the rank that plays it), the run
settings presets share, the action-space checks. :class:`Recipe` and :class:`RoleContext` live in
:mod:`distrl.runtime.context` (lower layers receive them) and are re-exported here.

Recipes: the rank-to-role table of one architecture plus its default config.

A recipe holds no training loop. It says which role each rank plays for a given world size,
checks that the world size and config fit before any process group starts (one ``ValueError``
line naming the layout it needs), and names the role classes the runner builds.
"""

from __future__ import annotations

from distrl.config import Config
from distrl.runtime.context import Recipe, Role, RoleContext, RoleFactory

__all__ = [
    "Recipe",
    "Role",
    "RoleContext",
    "RoleFactory",
    "role",
    "ATARI_RUN",
    "MUJOCO_ENVS",
    "MUJOCO_RUN",
    "MUJOCO_AC",
    "DEBUG_RUN",
    "ENV_PRESETS",
    "require_discrete_actions",
    "check_action_space",
]


def role(path: str) -> RoleFactory:
    """The builder of role class ``"module:Class"`` (or of ``"module:function"``, which picks the class from
    the context: apex's learner and actor), imported only when a rank builds it: the CLI
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


#: The run settings every recipe's ``atari`` preset shares (``ALE/*`` ids pick it by themselves).
#: Budgets count agent steps (x4 emulator frames). A full-game evaluation of Pong lasts 800-20,000
#: agent steps a game, so it runs every 5 minutes on 4 games rather than every 20 s on 10.
ATARI_RUN = {
    "run.env": "ALE/Pong-v5",
    "run.total_frames": 50_000_000,
    "run.max_time_s": 3600.0,
    "run.eval_episodes": 4,
    "run.eval_interval_s": 300.0,
    "run.checkpoint_interval_s": 300.0,
}


#: gymnasium's MuJoCo ids (``pip install -e ".[mujoco]"``): each recipe's ``mujoco`` preset serves them
#: (``ENV_EXPERIMENTS``), with its own settings tuned on ``InvertedPendulum-v5`` and ``HalfCheetah-v5``.
MUJOCO_ENVS = (
    "Ant-v5",
    "HalfCheetah-v5",
    "Hopper-v5",
    "Humanoid-v5",
    "HumanoidStandup-v5",
    "InvertedDoublePendulum-v5",
    "InvertedPendulum-v5",
    "Pusher-v5",
    "Reacher-v5",
    "Swimmer-v5",
    "Walker2d-v5",
)
#: The run settings every recipe's ``mujoco`` preset shares: HalfCheetah by default, a greedy
#: evaluation of 5 episodes (1,000 steps each) every 30 s, 20 minutes.
MUJOCO_RUN = {
    "run.env": "HalfCheetah-v5",
    "run.total_frames": 20_000_000,
    "run.max_time_s": 1200.0,
    "run.eval_episodes": 5,
    "run.eval_interval_s": 30.0,
}
#: The actor-critic recipes' MuJoCo habits (PPO's, Schulman et al. 2017): Adam 3e-4, gamma 0.99, no entropy
#: bonus (the learned std explores), advantages normalised, rewards x 0.1 in the loss (HalfCheetah's ~5 a
#: step is a value of ~500 at gamma 0.99, 50 scaled), tanh (64, 64) MLPs. Each preset adds its batching.
MUJOCO_AC = {
    **MUJOCO_RUN,
    "algo.lr": 3e-4,
    "algo.gamma": 0.99,
    "algo.entropy_coef": 0.0,
    "algo.normalize_advantage": True,
    "algo.reward_scale": 0.1,
    "net.hidden": (64, 64),
    "net.activation": "tanh",
}

#: The run settings of every recipe's ``debug`` preset: the deterministic toy env, a budget of seconds.
DEBUG_RUN = {
    "run.env": "distrl/MatchSign-v0",
    "run.total_frames": 20_000,
    "run.max_time_s": 60.0,
    "run.eval_episodes": 10,
    "run.logger": "none",
}

#: Env ids -> the preset tuned for them: ``--env`` picks it in every recipe module that defines a preset of
#: that name (a pattern such as ``ALE/*`` matches every game); a module's own ``ENV_EXPERIMENTS`` adds to it.
ENV_PRESETS = {"MinAtar/Breakout-v1": "minatar", "ALE/*": "atari", **{e: "mujoco" for e in MUJOCO_ENVS}}


def require_discrete_actions(cfg: Config) -> None:
    """``ValueError`` naming the recipe when ``cfg.run.env`` has continuous actions (a DQN recipe, whose
    network ends in Q-values, calls it from its config check: the custom seed_apex)."""
    from distrl.envs.gym import env_info

    if env_info(cfg.run.env).num_actions is None:
        raise ValueError(
            f"{cfg.recipe} is a DQN and acts in discrete action spaces only; {cfg.run.env} is continuous: "
            "use impala, seed, sf, a3c or vecenv (Gaussian policies)"
        )


def check_action_space(cfg: Config) -> None:
    """The actor-critic recipes' check: they take one discrete action (the categorical head) or one flat
    box (the Gaussian head), over flat or image observations, from a gymnasium id and from a TorchRL env
    factory alike. Resolving the env is the check: what no head reads (a ``MultiDiscrete``, a
    ``Dict`` of actions, an observation neither flat nor an image) is refused there in one line."""
    from distrl.envs.gym import env_info

    env_info(cfg.run.env)
