"""Images end to end: the env boundary, and every path keeping an image's dtype up to the network."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.data.wire import payload_nbytes
from distrl.envs.gym import MINATAR_MAX_EPISODE_STEPS, check_env_id, env_info, evaluate, make_env
from distrl.nn.models import ActorCritic, QNetwork, sample_actions
from distrl.data.trajectory import check_trajectory
from distrl.recipes.sf.slots import rollout_layout
from distrl.roles.batcher import Request
from distrl.roles.env_runner import EnvRunner

BREAKOUT = "MinAtar/Breakout-v1"
SHAPE = (4, 10, 10)  # Breakout's channels: paddle, ball, trail, brick


def test_minatar_ids_are_channels_first_bool_with_a_time_limit():
    env = make_env(BREAKOUT)
    obs, _ = env.reset(seed=0)
    assert obs.shape == SHAPE and obs.dtype == np.bool_ and obs.flags.c_contiguous
    assert env.observation_space.shape == SHAPE and env.spec.max_episode_steps == MINATAR_MAX_EPISODE_STEPS
    info = env_info(BREAKOUT)
    assert (info.shape, info.obs_dtype, info.num_actions, info.obs_dim) == (SHAPE, torch.bool, 3, 400)
    assert env_info("CartPole-v1").shape == (4,) and env_info("CartPole-v1").obs_dtype == torch.float32


def test_a_minatar_id_without_the_package_says_what_to_install(monkeypatch):
    import gymnasium as gym

    monkeypatch.setitem(sys.modules, "minatar.gym", None)  # import minatar.gym now raises ImportError
    monkeypatch.setattr(gym, "registry", {k: v for k, v in gym.registry.items() if not k.startswith("MinAtar/")})
    with pytest.raises(ValueError, match=r'pip install -e "\.\[minatar\]" in the distrl checkout') as e:
        check_env_id(BREAKOUT)
    assert "\n" not in str(e.value)


def test_an_actor_unroll_keeps_the_images_bool_and_the_message_small():
    """IMPALA's message: the observations are bool ``[B, T, 4, 10, 10]``, one byte an element, so
    the two observation entries cost 2 x 400 bytes a step (float32 would cost 3,200)."""
    B, T = 4, 8
    runner = EnvRunner(BREAKOUT, B, seed=0, rank=1)
    model = ActorCritic(SHAPE, 3)
    gen = torch.Generator().manual_seed(0)
    try:
        traj, _, _ = runner.unroll(
            lambda obs: dict(zip((keys.ACTION, keys.ACTION_LOG_PROB), sample_actions(model.policy(obs), gen))), T
        )
    finally:
        runner.close()
    assert traj[keys.OBSERVATION].dtype == torch.bool and traj[keys.OBSERVATION].shape == (B, T, *SHAPE)
    assert traj[keys.NEXT_OBSERVATION].dtype == torch.bool
    traj[keys.POLICY_VERSION] = torch.zeros(B, T, dtype=torch.int64)  # the actor stamps it
    assert check_trajectory(traj, SHAPE, torch.bool) is None
    assert "expected [B, T, 4, 10, 10] bool" in check_trajectory(traj.apply(lambda x: x.float()), SHAPE, torch.bool)
    obs_bytes = payload_nbytes(TensorDict({keys.OBSERVATION: traj[keys.OBSERVATION]}))
    assert obs_bytes == B * T * 400


def test_seed_requests_and_sf_slots_hold_images_in_their_dtype():
    B = 3
    obs = torch.zeros(B, *SHAPE, dtype=torch.bool)
    done = torch.tensor([True, False, False])
    msg = TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.STEP_REWARD: torch.zeros(B),
            keys.STEP_TERMINATED: done,
            keys.STEP_TRUNCATED: torch.zeros(B, dtype=torch.bool),
            keys.FINAL_OBSERVATION: torch.ones(1, *SHAPE, dtype=torch.bool),
            keys.WORKER_RANK: torch.tensor(1),
            keys.ENV_GROUP: torch.tensor(0),
            keys.RUN_ID: torch.tensor(7),
        }
    )
    req = Request.from_message(msg, B, SHAPE, torch.bool)
    assert req.obs.dtype == torch.bool and req.final_obs.shape == (1, *SHAPE)
    with pytest.raises(ValueError, match="expected"):
        Request.from_message(
            msg.apply(lambda x: x.float() if x.dtype == torch.bool and x.dim() > 1 else x), B, SHAPE, torch.bool
        )
    layout = rollout_layout(2, B, 5, SHAPE, 10, 1, torch.bool)
    assert layout[keys.TRAJ][keys.OBSERVATION].dtype == torch.bool
    assert layout[keys.TRAJ][keys.OBSERVATION].shape == (2, B, 5, *SHAPE)


def test_greedy_evaluation_runs_an_image_q_network():
    q = QNetwork(SHAPE, 3)
    returns = evaluate(q, BREAKOUT, episodes=2, seed=0, device=torch.device("cpu"))
    assert len(returns) == 2 and all(r >= 0 for r in returns)
