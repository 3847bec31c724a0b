"""A3C (Mnih et al., 2016): workers compute actor-critic gradients on their own envs and push
them to a parameter server, which applies each as it arrives; ``algo.sync`` turns it into A2C.

Rank 0 is the parameter server, every other rank a worker. At world size 1 the server and
``algo.local_workers`` workers share one process (threads over the local transport, which
hands tensors over by reference: no copy, no serialisation).

Presets (``--experiment NAME``): ``default`` is the CartPole run; ``debug`` finishes in seconds;
``a2c`` and ``debug_a2c`` are the same with the synchronous switch on, for side-by-side runs; ``minatar`` learns
MinAtar Breakout
from its ``[4, 10, 10]`` bool images; ``mujoco`` serves every MuJoCo id (a Gaussian policy over
normalised observations, whose statistics the server merges from the moments workers push).
"""

from __future__ import annotations


from distrl.config import Config, RunConfig, override
from distrl.recipes.base import ATARI_RUN, DEBUG_RUN, MUJOCO_AC, Recipe, role, check_action_space
from distrl.recipes.a3c.config import OPTIMIZERS, WIRE_DTYPES, A3CConfig  # noqa: F401 (cfg.algo's class, here as before)


# The presets are tables of settings, kept dense as tables (ruff's formatter would give each its line).
# fmt: off
def default() -> Config:
    """CartPole-v1: 32 envs per worker, t_max 32 (1024 frames per gradient push)."""
    return Config(recipe="a3c", algo=A3CConfig(), run=RunConfig(env="CartPole-v1"))


def a2c() -> Config:
    """``default`` made synchronous: one mean gradient per round of every live worker."""
    return override(default(), **{"algo.sync": True})


def minatar() -> Config:
    """MinAtar/Breakout-v1 (10x10 images, the minatar encoder), stopping at a greedy score of 10.

    Gradients and parameters cross in bfloat16 and a push stands for 64 envs x t_max 20 = 1,280 env
    steps, so bytes on the wire per env step stay under the observation's own 400 plus 64: the
    network's P = 132,308 parameters make a push and its reply 2 * 2P = 529,232 bytes, 413.5 a step
    (``tests/test_a3c_wire.py`` checks it; measured: docs/a3c.md, "The gradient", and docs/pixels.md,
    "Bytes on the wire"). The return stays a 20-step one; a gradient averages 4x the segments, so
    there are 4x fewer updates per frame.

    The optimizer is IMPALA's MinAtar one (Adam, lr 6e-4, eps 1e-5, clip 1.0): CartPole's RMSProp
    did not learn here (docs/pixels.md, "Results")."""
    return override(
        default(),
        **{"run.env": "MinAtar/Breakout-v1", "run.total_frames": 50_000_000, "run.max_time_s": 1200.0,
           "run.target_return": 10.0, "run.eval_episodes": 10, "algo.envs_per_worker": 64, "algo.t_max": 20,
           "algo.wire_dtype": "bfloat16", "algo.reward_scale": 1.0, "algo.entropy_coef": 0.05,
           "algo.optimizer": "adam", "algo.lr": 6e-4, "algo.optim_eps": 1e-5, "algo.max_grad_norm": 1.0,
           "algo.normalize_advantage": True},
    )


def atari() -> Config:
    """``ALE/*`` games (Pong by default; the Nature encoder): the paper's t_max of 5 on 16 envs a worker,
    Adam as in the MinAtar preset, gradients and parameters in bfloat16 on the wire (a Nature net is
    1.7M parameters: 3.4 MB each way per push), clipped rewards unscaled. Advantages normalised per batch, as
    sf's preset (docs/atari.md: raw ones left sf's policy uniform on Breakout)."""
    return override(
        default(),
        **{**ATARI_RUN, "algo.envs_per_worker": 16, "algo.t_max": 5, "algo.wire_dtype": "bfloat16",
           "algo.reward_scale": 1.0, "algo.entropy_coef": 0.01, "algo.optimizer": "adam", "algo.lr": 6e-4,
           "algo.optim_eps": 1e-5, "algo.max_grad_norm": 1.0, "algo.normalize_advantage": True},
    )


def mujoco() -> Config:
    """MuJoCo (HalfCheetah by default; ``ENV_EXPERIMENTS`` sends every MuJoCo id here): a Gaussian
    head with a learned log-std over normalised observations (``net.obs_norm`` auto), the (64, 64)
    tanh MLPs of PPO's MuJoCo setup.

    Adam at 3e-4 (eps 1e-5), the continuous-control habit, in place of CartPole's RMSProp: its eps
    of 1e-3 sits above these gradients' RMS and would shrink every step. Advantages normalised per
    push, so the policy step does not swing with the return's scale (1 a step on InvertedPendulum,
    up to ~10 on HalfCheetah). No entropy bonus: the learned log-std explores, and a bonus on a
    Gaussian only pushes it up. Rewards scaled by 0.1 (the default) keep the critic's targets near
    10-100 at gamma 0.99. 16 envs x t_max 16 = 256 steps a push, a 16-step return. Gradients and
    parameters stay float32 on the wire (the observation statistics ride in the vector; the nets
    are ~10k parameters).

    Measured: docs/continuous.md, "Results"."""
    return override(
        default(),
        **{**MUJOCO_AC, "algo.envs_per_worker": 16, "algo.t_max": 16, "algo.optimizer": "adam",
           "algo.optim_eps": 1e-5, "algo.max_grad_norm": 0.5},
    )


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{**DEBUG_RUN, "algo.envs_per_worker": 8, "algo.t_max": 20},
    )


def debug_a2c() -> Config:
    """``debug`` with ``algo.sync``."""
    return override(debug(), **{"algo.sync": True})
# fmt: on


def _check_config(cfg: Config) -> None:
    check_action_space(cfg)
    if cfg.algo.wire_dtype != "float32" and cfg.net.obs_norm != "off":
        from distrl.envs.gym import env_info
        from distrl.nn.models import wants_obs_norm

        info = env_info(cfg.run.env)
        if wants_obs_norm(info.shape, info.num_actions is None, cfg.net):
            # the statistics travel inside the parameter vector: bfloat16 keeps 3 significant digits
            raise ValueError(
                f"algo.wire_dtype={cfg.algo.wire_dtype} would round the observation statistics that travel "
                "with the parameters: use algo.wire_dtype=float32 or net.obs_norm=off"
            )


RECIPE = Recipe(
    name="a3c",
    description="A3C: workers push actor-critic gradients, a parameter server applies them as they come "
    "(algo.sync=true: A2C)",
    layout="rank 0 parameter server, ranks 1..N-1 workers",
    min_world_size=2,
    roles_for=lambda n: ["parameter_server"] + ["worker"] * (n - 1),
    builders={
        "parameter_server": role("distrl.recipes.a3c.parameter_server:ParameterServer"),
        "worker": role("distrl.recipes.a3c.worker:A3CWorker"),
    },
    default_config=default,
    local_world_size=lambda cfg: 1 + cfg.algo.local_workers,
    check_config=_check_config,
    takes_env_factory=True,
    critical_roles=frozenset({"parameter_server"}),
    compare_nproc=3,
    table_row=("A3C", "2016", "CPU (inference)", "CPU (shared)", "async", "simple tasks, small scale"),
)
