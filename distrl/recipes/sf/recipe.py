"""Sample Factory (Petrenko et al., 2020): double-buffered rollout workers, a batched policy
worker, trajectories in shared memory, an asynchronous APPO learner with the policy lag capped.

Rank 0 is the learner; ranks ``1..algo.inference_ranks`` are inference (policy) workers; every
other rank is a rollout worker that steps two groups of envs in turn, so one group's envs step
while inference computes the other's actions. Observations, actions and whole trajectories live
in shared memory that the learner allocates once (``distrl/recipes/sf/slots.py``); the per-step
signals go through named pipes beside it (``distrl/recipes/sf/doorbell.py``), the rest over the
transport, and both carry slot numbers only. One node: shared memory does not cross machines. At world size 1 the
learner, one inference worker and ``algo.local_workers`` rollout workers share one process.

Presets (``--experiment NAME``): ``default`` (CartPole), ``debug`` (seconds), ``minatar``, ``atari`` and
``mujoco``: a Gaussian head (``distrl/nn/heads.py``) over normalised observations (``distrl/nn/obs_norm.py``),
float32 ``[A]`` actions in the slots, the statistics in the parameter vector inference reads.
"""

from __future__ import annotations


from distrl.config import Config, RunConfig, override
from distrl.recipes.base import ATARI_RUN, DEBUG_RUN, MUJOCO_AC, Recipe, role, check_action_space
from distrl.recipes.sf.config import SFConfig  # noqa: F401 (cfg.algo's class, here as before)


# The presets are tables of settings, kept dense as tables (ruff's formatter would give each its line).
# fmt: off
def default() -> Config:
    """CartPole-v1: 2 groups of 128 envs per rollout worker, 64 trajectories of 32 steps per update."""
    return Config(recipe="sf", algo=SFConfig(), run=RunConfig(env="CartPole-v1"))


def minatar() -> Config:
    """MinAtar/Breakout-v1 to a greedy 10: fewer envs than CartPole's (a conv forward costs more than the env)."""
    return override(
        default(),
        **{"run.env": "MinAtar/Breakout-v1", "run.total_frames": 50_000_000, "run.max_time_s": 900.0,
           "run.target_return": 10.0, "run.eval_episodes": 10, "algo.envs_per_worker": 64, "algo.batch_size": 32,
           "algo.reward_scale": 1.0, "algo.entropy_coef": 0.05},
    )


def atari() -> Config:
    """``ALE/*`` games (Pong by default; the Nature encoder): Sample Factory 2's Atari settings
    (SF2 = its ``sf_examples/atari/atari_params.py``; CleanRL's ``ppo_atari.py`` shares most), on sf's
    asynchronous layout. The ablation that chose them: docs/atari.md. From SF2:

    - PPO on GAE(0.95) taken once per batch, minibatches of single samples shuffled across it
      (``algo.minibatch=samples``), 4 passes of 4 minibatches of 256 over 1,024 samples (32 rows of
      32 steps), clip 0.1, value loss x 0.5, entropy bonus 0.01, gradient norm clipped at 0.5,
      advantages normalised per minibatch, rewards clipped to -1..1;
    - Adam (eps 1e-5) at lr 2.5e-4, held constant: SF2 decays it linearly over its 10M frames (2.5M
      agent steps), but decayed over this machine's hour (1.4M agent steps) Pong stalled at +9 from
      0.8M steps where the constant rate went on to +13 (docs/atari.md; ``run.lr_schedule=linear``
      decays it on the clock a resume restores);
    - observations standardised pixel by pixel (``net.obs_norm=on``, SF2's ``normalize_input``) and
      the critic on standardised value targets (``net.value_norm=on``, its ``normalize_returns``);
      orthogonal initial weights (``net.init=orthogonal``, SF2's default and CleanRL's ``layer_init``).

    sf's own: decoupled PPO (``algo.decoupled``): batches reach the learner ~55 updates behind the
    network (4 batches in flight, 16 steps each), and PPO's 0.1 clip against the behaviour policy
    zeroes the gradient of a quarter of the samples before a step; rows older than 100 updates are
    dropped; 2 groups of 16 envs per rollout worker; the learner on a core of its own (it bounds the
    run); the encoder in bfloat16 where the CPU computes it natively (``net.precision=auto``)."""
    return override(
        default(),
        **{**ATARI_RUN, "algo.envs_per_worker": 32, "algo.batch_size": 32, "algo.lr": 2.5e-4,
           "algo.num_epochs": 4, "algo.num_minibatches": 4, "algo.vtrace": False, "algo.gae_lambda": 0.95,
           "algo.minibatch": "samples", "algo.decoupled": True,
           "algo.clip_eps": 0.1, "algo.max_grad_norm": 0.5,
           "algo.reward_scale": 1.0, "algo.entropy_coef": 0.01, "algo.normalize_advantage": True,
           "algo.max_policy_lag": 100,
           "run.lr_schedule": "constant", "net.precision": "auto", "net.init": "orthogonal",
           "net.obs_norm": "on", "net.value_norm": "on",
           "algo.learner_cores": 1},  # the learner bounds the run: a core to itself (docs/atari.md)
    )


def mujoco() -> Config:
    """MuJoCo (HalfCheetah-v5 by default; every id of ``MUJOCO_ENVS``): a Gaussian policy (a learned
    log-std vector, std 1 at the start) over ObsNorm'd observations; ``MUJOCO_AC``'s PPO habits, and:

    - 2 groups of 16 envs per worker: a MuJoCo step (~0.1 ms) is as cheap as CartPole's, but 64
      envs in all (two workers) keep each update's 1,024 samples (32 rows of 32 steps) from few
      episodes' worth of states, and updates frequent (5-10 a second at 2 cores);
    - GAE(0.95), not V-trace: V-trace's advantage is the lambda = 1 return, whose variance over
      HalfCheetah's 1,000-step episodes swamps the policy gradient; the lag is kept small instead
      (10 batches, ``max_policy_lag`` 40 steps below: almost nothing is dropped)
      and PPO's clipped ratio corrects the policy term for it;
    - 4 passes over each batch (``algo.num_epochs``), PPO's habit: one step per batch left the
      learner waiting for rows 80% of the time and HalfCheetah at 1,500 only after ~550 s; the lag
      cap counts steps, so it is 4 x 10.

    Measured: docs/continuous.md (InvertedPendulum-v5 and HalfCheetah-v5 over seeds, with commands).
    """
    return override(
        default(),
        **{**MUJOCO_AC, "algo.envs_per_worker": 32, "algo.unroll_length": 32, "algo.batch_size": 32,
           "algo.vtrace": False, "algo.gae_lambda": 0.95, "algo.num_epochs": 4, "algo.max_policy_lag": 40},
    )


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{**DEBUG_RUN, "algo.envs_per_worker": 16, "algo.unroll_length": 20, "algo.batch_size": 16},
    )
# fmt: on


def _roles(n: int, cfg: Config) -> list[str]:
    return (
        ["learner"] + ["inference"] * cfg.algo.inference_ranks + ["rollout_worker"] * (n - 1 - cfg.algo.inference_ranks)
    )


def _check_config(cfg: Config) -> None:
    a = cfg.algo
    # A worker holds one slot per group while it fills it; the learner must be able to fill a
    # batch from the others even with a single worker, or both would wait on each other.
    spare_rows = a.groups_per_worker * (a.slots_per_group - 1) * a.envs_per_group
    if a.batch_size > spare_rows:
        raise ValueError(
            f"algo.batch_size ({a.batch_size}) must be at most groups_per_worker x (slots_per_group - 1)"
            f" x envs_per_group ({spare_rows}): the rows one worker hands in while filling its next slots"
        )
    check_action_space(cfg)
    if cfg.net.value_norm == "on" and a.minibatch != "samples":
        raise ValueError(
            "net.value_norm=on folds each batch's value targets in once, before its steps: set algo.minibatch=samples"
        )
    if max(cfg.algo.request_timeout_s, cfg.algo.slot_timeout_s) >= cfg.transport.call_timeout_s:
        raise ValueError(
            f"algo.request_timeout_s and algo.slot_timeout_s must be below transport.call_timeout_s "
            f"({cfg.transport.call_timeout_s})"
        )


RECIPE = Recipe(
    name="sf",
    description="Sample Factory: double-buffered rollout workers, batched inference, shared memory, APPO",
    layout="rank 0 learner, ranks 1..R inference (algo.inference_ranks), the rest rollout workers (at least one)",
    min_world_size=3,
    roles_for=lambda n: _roles(n, default()),
    builders={
        "learner": role("distrl.recipes.sf.learner:SFLearner"),
        "inference": role("distrl.recipes.sf.inference:SFInference"),
        "rollout_worker": role("distrl.recipes.sf.rollout_worker:SFRolloutWorker"),
    },
    default_config=default,
    local_world_size=lambda cfg: 1 + cfg.algo.inference_ranks + cfg.algo.local_workers,
    check_config=_check_config,
    takes_env_factory=True,
    takes_value_norm=True,
    roles_for_config=_roles,
    min_world_size_for=lambda cfg: 2 + cfg.algo.inference_ranks,
    critical_roles=frozenset({"learner", "inference"}),
    source_roles=frozenset({"rollout_worker"}),
    compare_nproc=4,
    table_row=("Sample Factory", "2020", "CPU (vectorized)", "GPU", "async", "high fps on one machine"),
)
