"""SEED RL experiments. ``default`` is the CartPole run; ``debug`` finishes in seconds;
``lstm_cartpole`` learns CartPole with the velocities hidden, with an LSTM core on the server."""
from __future__ import annotations

from distrl.architectures.seed import default_config as _recipe_default
from distrl.config import Config, override


def default() -> Config:
    """CartPole-v1: 2 groups of 128 envs per env worker, 128 trajectories of 16 steps per update."""
    return _recipe_default()


def debug() -> Config:
    """A tiny budget on the deterministic toy env: exercises every role in seconds on CPU."""
    return override(
        default(),
        **{"run.env": "distrl/MatchSign-v0", "run.total_frames": 20_000, "run.max_time_s": 60.0,
           "run.eval_episodes": 10, "run.logger": "none", "algo.envs_per_worker": 16, "algo.unroll_length": 20,
           "algo.batch_size": 16},
    )


def debug_lstm() -> Config:
    """``debug`` with the LSTM core: the recurrent path end to end in seconds.

    40k frames, twice ``debug``'s: at 20k the greedy score was 18.7-20 when the cores were busy
    (the training mean was still ~13). lr 1e-3, not the recipe's 3e-4 (chosen for CartPole's
    hold): with 3e-4 the greedy score at 40k was 17.4-19.9 over seeds 0-5, three of six under the
    test's 19; with 1e-3 it was 20 in all of seeds 0-7, and in seeds 10-13 with a busy core.
    """
    return override(debug(), **{"algo.core": "lstm", "algo.core_size": 32, "net.hidden": (32,),
                                "run.total_frames": 40_000, "algo.lr": 1e-3})


def lstm_cartpole() -> Config:
    """CartPole with position and angle only (distrl/CartPoleNoVel-v1): memory is required.

    gamma 0.995: without the cart's velocity the policy lets the cart drift, and the episodes it
    loses end out of bounds 200-400 steps later, past gamma 0.99's horizon (measured: 0.99 stalled
    at 300-450 and collapsed; 0.995 reached the target). It stops at a training mean of 490 so the
    greedy policy is sharp: at 450 the greedy evaluation scored 335. Raw advantages (the default):
    with ``algo.normalize_advantage`` it was at 180 after 2.5M frames. Entropy 0.01, the value
    it was measured with (the recipe's default is 0.003), with the recipe's defaults of that day:
    lr 1e-3 and unscaled rewards.
    """
    return override(
        default(),
        **{"run.env": "distrl/CartPoleNoVel-v1", "run.target_return": 490.0, "run.max_time_s": 600.0,
           "algo.core": "lstm", "algo.core_size": 64, "net.hidden": (64,), "algo.gamma": 0.995,
           "algo.entropy_coef": 0.01, "algo.lr": 1e-3, "algo.reward_scale": 1.0},
    )
