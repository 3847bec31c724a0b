"""On-device vectorized environments (the Isaac Gym paradigm): synchronous PPO with the envs,
the policy, the rollout storage and the optimizer on one device.

Every rank is a learner that steps its own ``algo.num_envs`` envs (seeded by rank) and holds a
model replica; gradients are averaged over the ranks (gloo on CPU, nccl on CUDA), so more ranks
is plain data parallelism. Rank 0 also owns the logging, the stop rule and the checkpoints.
Policy lag is 0: every sample comes from the parameters being updated.

Presets (``--experiment NAME``): ``default`` is torch CartPole to 475; ``pendulum`` the
continuous-action run; ``minatar`` torch MinAtar Breakout from ``[4, 10, 10]`` bool images;
``minatar_gymnax`` gymnax's MinAtar PPO (an MLP on the flattened grid, 10M steps) and
``minatar_gymnax_freeway`` its Freeway row (the learning rate decayed);
``debug`` finishes in seconds on CPU; ``gym_serial`` runs the same PPO through the generic TorchRL path.
"""

from __future__ import annotations


from distrl.config import Config, NetConfig, RunConfig, override
from distrl.recipes.base import ATARI_RUN, MUJOCO_RUN, Recipe, role
from distrl.recipes.vecenv.config import ALLREDUCE_DTYPES, VecEnvConfig  # noqa: F401 (cfg.algo's class, here as before)


# The presets are tables of settings, kept dense as tables (ruff's formatter would give each its line).
# fmt: off
def default() -> Config:
    """Torch CartPole-v1, 1024 envs x 8 steps per update, stops at a training return of 475.

    A 32-wide ReLU MLP: CartPole needs no more, and
    on CPU the update's cost is the network's (tanh alone costs 2.5 ns an element here, more than
    the matmuls of a 64-wide layer)."""
    return Config(
        recipe="vecenv", algo=VecEnvConfig(), net=NetConfig(hidden=(32, 32), activation="relu"),
        run=RunConfig(env="CartPole-v1", target_return=475.0, total_frames=50_000_000, max_time_s=300.0),
    )


def pendulum() -> Config:
    """Torch Pendulum-v1 (continuous torque) for 2M frames: a short horizon (gamma 0.95), costs
    scaled by 0.1, running observation normalisation (``net.obs_norm``'s ``auto`` for continuous
    actions: theta_dot spans +-8, the rest +-1), an initial log-std of -0.5 and a
    learning rate annealed to 0: without the normalisation and the annealing the greedy return
    wandered (measured: docs/vecenv.md, "What holds now"; the runs: docs/benchmarks.md, "vecenv
    history")."""
    return override(
        default(),
        **{"run.env": "Pendulum-v1", "run.target_return": None, "run.total_frames": 2_000_000, "run.max_time_s": 280.0,
           "run.eval_episodes": 32, "algo.num_envs": 512, "algo.rollout_length": 32, "algo.epochs": 4,
           "algo.num_minibatches": 8, "algo.lr": 1e-3, "algo.anneal_lr": True, "algo.gamma": 0.95,
           "algo.reward_scale": 0.1, "net.init_log_std": -0.5},
    )


def minatar() -> Config:
    """Torch MinAtar/Breakout-v1 (``distrl.envs.torch_envs``; the minatar encoder), to a greedy score
    of 10: 128 envs x 32 steps, 3 epochs of 4 minibatches, an entropy bonus of 0.05 (at 0.01 the
    policy's entropy fell to 0.2 within 2M frames and the greedy score stayed near 6: docs/pixels.md).
    Data parallel, gradients cross in bfloat16: 12 all-reduces of a 265 KB gradient per 4,096 frames
    a rank is 388 bytes an env step at 2 ranks, under the observation's 400 + 64 (775 in float32)."""
    return override(
        default(),
        **{"run.env": "MinAtar/Breakout-v1", "run.target_return": 10.0, "run.max_time_s": 300.0,
           "run.eval_episodes": 16, "algo.num_envs": 128, "algo.rollout_length": 32, "algo.epochs": 3,
           "algo.num_minibatches": 4, "algo.lr": 1e-3, "algo.entropy_coef": 0.05, "algo.allreduce_dtype": "bfloat16"},
    )


def minatar_gymnax() -> Config:
    """Torch MinAtar (Breakout by default; ``--env MinAtar/<Game>-v1`` for the others) with gymnax's PPO
    settings, for 10M env steps: the run beside gymnax's published PPO row (its README's table).

    Every value from gymnax-blines' ``agents/<Game>-MinAtar/ppo.yaml`` (the same file for Asterix,
    Breakout, Freeway and SpaceInvaders; github.com/RobertTLange/gymnax-blines, commit 3f029d6):
    ``num_train_steps`` 10M, ``num_train_envs`` 64, ``n_steps`` 128, ``epoch_ppo`` 4, ``n_minibatch``
    8, ``lr_begin`` = ``lr_end`` 5e-4 (constant: its 5% warm-up goes from 5e-4 to 5e-4), ``gamma``
    0.999, ``gae_lambda`` 0.95, ``clip_eps`` 0.2, ``entropy_coeff`` 0.01, ``critic_coeff`` 0.5,
    ``max_grad_norm`` 0.5 (global); ``Categorical-MLP`` with ``num_hidden_units`` 256,
    ``num_hidden_layers`` 2, ``flatten_3d``: separate policy and value MLPs on the flattened grid,
    ReLU (``utils/models.py``, ``CategoricalSeparateMLP``); Adam eps 1e-5 (``utils/ppo.py``, as
    vecenv's). Here that is ``net.encoder=mlp`` on ``[C, 10, 10]`` (``distrl.nn.encoders.MLPEncoder``
    flattens it). What differs (``utils/ppo.py``): gymnax also clips the value loss at ``clip_eps``
    and normalises advantages per minibatch, which vecenv does under ``algo.clip_value`` and
    ``algo.minibatch_adv_norm``, off here: the table in docs/pixels.md was run without them, and
    with them on Freeway (``--set algo.clip_value=true --set algo.minibatch_adv_norm=true``);
    flax's initialisation (lecun-normal kernels, biases uniform in [0, 0.05]) is PyTorch's here.
    The envs differ too: the package's sticky actions (0.1) and distrl's 10,000-step time limit,
    where gymnax's MinAtar (April 2023) had no sticky actions and ended episodes at 1,000 steps
    (Freeway: its own 2,500); ``--set algo.env_factory=distrl.envs.batched:minatar_gymnax_env``
    trains on gymnax's rules. No target return, no early stop; ``max_time_s`` far past 10M steps."""
    return override(
        default(),
        **{"run.env": "MinAtar/Breakout-v1", "run.target_return": None, "run.total_frames": 10_000_000,
           "run.max_time_s": 7200.0, "run.eval_episodes": 64, "run.eval_interval_s": 120.0,
           "algo.num_envs": 64, "algo.rollout_length": 128, "algo.epochs": 4, "algo.num_minibatches": 8,
           "algo.lr": 5e-4, "algo.anneal_lr": False, "algo.gamma": 0.999, "algo.gae_lambda": 0.95,
           "algo.clip_eps": 0.2, "algo.entropy_coef": 0.01, "algo.value_coef": 0.5, "algo.max_grad_norm": 0.5,
           "net.encoder": "mlp", "net.hidden": (256, 256), "net.activation": "relu"},
    )


def minatar_gymnax_freeway() -> Config:
    """Freeway's row of the gymnax table (docs/pixels.md): ``minatar_gymnax`` on ``MinAtar/Freeway-v1``
    trained on gymnax's rules (``distrl.envs.batched.minatar_gymnax_env``: no sticky actions; Freeway
    ends at its own 2,500 steps), with gymnax-blines' update (``algo.clip_value``,
    ``algo.minibatch_adv_norm``: its ``utils/ppo.py``) and the learning rate decayed linearly to 0 at
    10M steps (``algo.anneal_lr``; gymnax-blines keeps 5e-4). Why Freeway alone: at the constant rate
    its three seeds scored 57.2 (median, sampled), still rising slowly; decayed, 61.8, against gymnax's
    58. The other games met theirs with ``minatar_gymnax`` (Space Invaders on gymnax's rules)."""
    return override(
        minatar_gymnax(),
        **{"run.env": "MinAtar/Freeway-v1", "algo.env_factory": "distrl.envs.batched:minatar_gymnax_env",
           "algo.clip_value": True, "algo.minibatch_adv_norm": True, "algo.anneal_lr": True},
    )


def atari() -> Config:
    """``ALE/*`` games (Pong by default; the Nature encoder) in ale-py's C++ vector env on the CPU
    (not on the device: ``distrl.envs.batched.GymVectorEnv``), with PPO's Atari settings (Schulman
    et al. 2017): 8 envs x 128 steps, 4 epochs of 4 minibatches, lr 2.5e-4, clip 0.1, entropy 0.01."""
    return override(
        default(),
        **{**ATARI_RUN, "algo.num_envs": 8, "algo.rollout_length": 128, "algo.epochs": 4,
           "algo.num_minibatches": 4, "algo.lr": 2.5e-4, "algo.clip_eps": 0.1, "algo.entropy_coef": 0.01},
    )


def debug() -> Config:
    """Torch CartPole for a few seconds: every part of the loop runs, on CPU, in well under 60 s."""
    return override(
        default(),
        **{"run.total_frames": 200_000, "run.max_time_s": 50.0, "run.target_return": None, "run.logger": "none",
           "run.eval_episodes": 10, "algo.num_envs": 256, "algo.rollout_length": 16},
    )


def gym_serial() -> Config:
    """The generic TorchRL path: gymnasium CartPole in a ``SerialEnv`` (slow: CPU envs, TensorDicts)."""
    return override(
        debug(),
        **{"algo.env_factory": "distrl.envs.batched:gym_serial_env", "algo.num_envs": 16, "run.total_frames": 8_192},
    )


def mujoco() -> Config:
    """gymnasium's MuJoCo ids (HalfCheetah-v5 by default) in gymnasium's vector env on the CPU, with
    PPO's MuJoCo settings (Schulman et al. 2017; cleanrl's ppo_continuous_action): a 64x64 tanh MLP,
    a state-independent log-std from 0, lr 3e-4, GAE(0.99, 0.95), 10 epochs, clip 0.2, no entropy
    bonus, observations normalised (``net.obs_norm``'s ``auto``). 16 envs x 128 steps (2,048
    samples an update, as PPO's 1 x 2,048) in 8 minibatches of 256: on CPU a minibatch of 64 costs
    as much as one of 256. Rewards x0.1: HalfCheetah's returns reach 1,000s, and a critic that must
    travel 1/(1-gamma) = 100x a step's reward learns sooner in smaller units."""
    return override(
        default(),
        **{**MUJOCO_RUN, "run.target_return": None, "algo.num_envs": 16, "algo.rollout_length": 128,
           "algo.epochs": 10, "algo.num_minibatches": 8, "algo.lr": 3e-4, "algo.anneal_lr": True,
           "algo.gamma": 0.99, "algo.gae_lambda": 0.95, "algo.reward_scale": 0.1, "net.init_log_std": 0.0,
           "net.hidden": (64, 64), "net.activation": "tanh"},
    )


#: Pendulum's preset for ``--env Pendulum-v1`` (atari, minatar and mujoco come from ``ENV_PRESETS``)
ENV_EXPERIMENTS = {"Pendulum-v1": "pendulum"}
# fmt: on


def _check_config(cfg: Config) -> None:
    from distrl.envs.atari import is_atari
    from distrl.envs.batched import load_factory
    from distrl.envs.gym import check_env_id, env_info
    from distrl.envs.torch_envs import TORCH_ENV_IDS

    if cfg.algo.env_factory:
        load_factory(cfg.algo.env_factory)
    elif is_atari(cfg.run.env) or cfg.run.env not in TORCH_ENV_IDS:
        # gymnasium's vector env on the CPU (distrl.envs.batched.GymVectorEnv): any gymnasium id it can make
        check_env_id(cfg.run.env)
        try:
            env_info(cfg.run.env)  # builds one env: a missing dependency (Box2D, mujoco) is one line here
        except Exception as e:
            why = (str(e).strip().splitlines() or [""])[0]
            raise ValueError(
                f"vecenv cannot make {cfg.run.env!r} ({type(e).__name__}: {why}); install what it needs, "
                "or bring a batched TorchRL env with --set algo.env_factory=module:function"
            ) from None


RECIPE = Recipe(
    name="vecenv",
    description="on-device batched envs + synchronous PPO; more ranks = data parallel",
    layout="every rank a learner with its own env batch (data parallel)",
    min_world_size=1,
    roles_for=lambda n: ["learner"] * n,
    builders={"learner": role("distrl.recipes.vecenv.learner:VecEnvLearner")},
    default_config=default,
    local_world_size=lambda cfg: 1,
    check_config=_check_config,
    group="collective",
    compare_nproc=1,
    table_row=("GPU envs", "2021+", "GPU (Isaac Gym)", "GPU", "sync", "robotics, continuous control"),
)
