"""SEED with continuous actions: a Gaussian head on the server's model (feed-forward and LSTM core),
float32 ``[B, A]`` actions through the replies, the unroll buffers and the env workers' envs, log-probs
that are ``torch.distributions.Normal``'s, observation statistics the learner merges and inference
reads; and one short run on InvertedPendulum-v5 that must beat a random policy."""

from __future__ import annotations

import math
import queue
import threading
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.impala import impala_loss
from distrl.config import NetConfig, override
from distrl.data import keys
from distrl.data.wire import payload_nbytes
from distrl.envs.gym import env_info
from distrl.nn.heads import CategoricalHead, GaussianHead
from distrl.nn.models import ActorCritic
from distrl.nn.recurrent import RecurrentActorCritic, UnrolledCore
from distrl.recipes import get_recipe
from distrl.recipes.base import MUJOCO_ENVS, RoleContext
from distrl.recipes.seed import recipe as seed_recipe
from distrl.recipes.seed.env_worker import SeedEnvWorker
from distrl.recipes.seed.inference import InferenceServer
from distrl.nn.obs_norm import fold_observations
from distrl.data.unrolls import GroupTrajectories
from distrl.roles.batcher import (
    ACTION,
    FINAL_OBS,
    GROUP,
    OBS,
    RANK,
    REWARD,
    RUN_ID,
    STOP,
    TERMINATED,
    TRUNCATED,
    Request,
)

from helpers import assert_beats_random, read_summary

F, A = 3, 2  # observation features, action dims of the fake env below


def normal_log_prob(out: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """``log N(action; mean, exp(log_std))`` summed over ``A``, by torch.distributions: ``[*B]``."""
    mean, log_std = out[..., :A], out[..., A:]
    return torch.distributions.Normal(mean, log_std.exp()).log_prob(action).sum(-1)


def _model(core: str):
    torch.manual_seed(0)
    net = NetConfig(hidden=(8,))
    if core == "lstm":
        return RecurrentActorCritic(F, None, net, 4, action_dim=A)
    return ActorCritic(F, None, net, action_dim=A)


def _server(core: str, T: int = 3, envs: int = 2):
    cfg = override(
        get_recipe("seed").default_config(),
        **{
            "algo.envs_per_worker": envs,
            "algo.groups_per_worker": 1,
            "algo.unroll_length": T,
            "algo.core": core,
            "algo.core_size": 4,
            "net.hidden": (8,),
            "algo.max_wait_ms": 0.0,
            "run.env": "Pendulum-v1",
        },
    )
    out, lock = queue.Queue(maxsize=8), threading.Lock()
    return InferenceServer(_model(core), lock, lambda: 0, cfg, [1], F, torch.device("cpu"), out), out


def _msg(obs: torch.Tensor, reward=None, run_id: int = 1) -> TensorDict:
    n = obs.shape[0]
    z = torch.zeros(n, dtype=torch.bool)
    return TensorDict(
        {
            OBS: obs,
            REWARD: torch.zeros(n) if reward is None else reward,
            TERMINATED: z,
            TRUNCATED: z,
            FINAL_OBS: torch.zeros(0, F),
            RANK: torch.tensor(1),
            GROUP: torch.tensor(0),
            RUN_ID: torch.tensor(run_id),
        }
    )


@torch.no_grad()  # as the inference thread's loop serves
def _serve(server: InferenceServer, td: TensorDict, obs_shape=F) -> TensorDict:
    req = Request.from_message(td, td[OBS].shape[0], obs_shape)
    server._serve([req])
    return req.reply


# ---------------------------------------------------------------- the recurrent model's Gaussian head


def test_recurrent_gaussian_steps_replays_and_trains_with_normal_log_probs():
    model = _model("lstm")
    assert isinstance(model.head, GaussianHead) and model.head.action_shape == (A,)
    B, T = 2, 5
    obs, next_obs = torch.randn(B, T, F), torch.randn(B, T, F)
    done = torch.zeros(B, T, dtype=torch.bool)
    done[0, 1] = True
    state0 = torch.randn(B, 4, 4)
    out, _, state = model.step(obs[:, 0], state0)
    assert out.shape == (B, 2 * A) and state.shape == (B, 4, 4)
    action, log_prob = model.head.sample(out)
    assert action.shape == (B, A) and action.dtype == torch.float32
    torch.testing.assert_close(log_prob, normal_log_prob(out, action))
    torch.testing.assert_close(model.head.log_prob(out, action), normal_log_prob(out, action))
    view = UnrolledCore(model, state0, done)
    replay, _ = view(obs)
    torch.testing.assert_close(replay[:, 0], out)  # the replay's first step is the server's step
    assert view.head is model.head  # impala_loss reads a Gaussian through it, not as logits
    batch = TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: torch.randn(B, T, A),
            keys.ACTION_LOG_PROB: torch.full((B, T), -2.0),
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: next_obs,
                    "reward": torch.ones(B, T, 1),
                    "done": done[..., None],
                    "terminated": done[..., None],
                },
                [B, T],
            ),
        },
        [B, T],
    )
    hp = seed_recipe.mujoco().algo
    loss = impala_loss(UnrolledCore(model, state0, done), batch, hp)
    loss["loss"].backward()
    assert model.gaussian.log_std.grad is not None and model.policy_head.weight.grad is not None
    assert any(model.gaussian.log_std is p for p in model.tower_parameters()[0])  # clipped with the policy


def test_recurrent_discrete_model_is_unchanged_and_for_env_reads_the_action_space():
    discrete = RecurrentActorCritic(F, 3, NetConfig(hidden=(8,)), 4)
    assert isinstance(discrete.head, CategoricalHead) and discrete.gaussian is None
    assert not any("gaussian" in k for k in discrete.state_dict())  # checkpoints of earlier runs still load
    pendulum = RecurrentActorCritic.for_env(env_info("Pendulum-v1"), NetConfig(hidden=(8,)), 4)
    assert pendulum.head.continuous and pendulum.head.action_dim == 1 and pendulum.obs_norm is not None
    state = NetConfig(hidden=(8,), log_std="state", init_log_std=-1.0)
    out, _, _ = RecurrentActorCritic(F, None, state, 4, action_dim=A).step(torch.randn(5, F), torch.zeros(5, 4, 4))
    assert out.shape == (5, 2 * A) and torch.allclose(out[:, A:], torch.full((5, A), -1.0), atol=0.05)


# ---------------------------------------------------------------- buffers, replies, chunks


def test_unroll_buffers_keep_float_actions():
    g = GroupTrajectories(2, F, 2, action_shape=(A,), action_dtype=torch.float32)
    no = torch.zeros(2, dtype=torch.bool)
    g.observe(1, torch.zeros(2, F), torch.zeros(2), no, no, torch.zeros(0, F))
    actions = [torch.tensor([[0.5, -1.5], [2.0, 0.25]]), torch.tensor([[-3.0, 0.125], [1.0, -0.75]])]
    for a in actions:
        g.act(torch.zeros(2, F), a, torch.zeros(2), 0)
        cut = g.observe(1, torch.ones(2, F), torch.ones(2), no, no, torch.zeros(0, F))
    traj = cut[0][keys.TRAJ]
    assert traj[keys.ACTION].dtype == torch.float32 and traj[keys.ACTION].shape == (2, 2, A)
    torch.testing.assert_close(traj[keys.ACTION], torch.stack(actions, 1))


@pytest.mark.parametrize("core", ["mlp", "lstm"])
def test_server_replies_float_actions_and_records_normal_log_probs(core):
    server, out = _server(core)
    model, T = server.model, 3
    obs = [torch.randn(2, F) for _ in range(T + 1)]
    state = model.initial_state(2) if core == "lstm" else None
    replies, wants = [], []
    for t, o in enumerate(obs):
        with torch.no_grad():
            if core == "lstm":
                policy_out, _, state = model.step(o, state)
            else:
                policy_out = model.policy(o)
        reply = _serve(server, _msg(o, None if t == 0 else torch.ones(2)))
        assert reply[ACTION].dtype == torch.float32 and reply[ACTION].shape == (2, A) and not reply[STOP]
        replies.append(reply[ACTION])
        wants.append(normal_log_prob(policy_out, reply[ACTION]))
    # the reply is A float32s an env, against one int32 for a discrete action
    assert payload_nbytes(TensorDict({ACTION: replies[0]})) == 2 * A * 4
    traj = out.get_nowait()[0][keys.TRAJ]
    assert traj[keys.ACTION].dtype == torch.float32 and traj[keys.ACTION].shape == (2, T, A)
    torch.testing.assert_close(traj[keys.ACTION], torch.stack(replies[:T], 1))  # what the envs were sent
    torch.testing.assert_close(traj[keys.ACTION_LOG_PROB], torch.stack(wants[:T], 1))


def test_observation_statistics_the_learner_merges_reach_inference():
    server, _ = _server("mlp")
    model, norm = server.model, server.model.obs_norm
    assert norm is not None  # auto: flat observations and continuous actions
    seen = torch.randn(4, 8, F) * torch.tensor([10.0, 0.1, 1.0]) + torch.tensor([5.0, -1.0, 0.0])
    # folded under the lock inference holds around its forward: it waits while the lock is held
    done = threading.Event()
    with server.lock:
        t = threading.Thread(target=lambda: (fold_observations(norm, seen, server.lock), done.set()))
        t.start()
        assert not done.wait(0.2) and float(norm.count) < 1
    t.join(10)
    torch.testing.assert_close(norm.mean, seen.reshape(-1, F).mean(0), rtol=1e-4, atol=1e-4)
    # the next batch served is normalised with them: its log-probs are those of the updated policy
    o = torch.randn(2, F) * 10
    _serve(server, _msg(o))
    g = server.groups[(1, 0)]
    with torch.no_grad():
        want = normal_log_prob(model.policy(o), g.action[0])
        stale = normal_log_prob(model.policy[1](o), g.action[0])  # the tower without the normaliser
    torch.testing.assert_close(g.log_prob[0], want)
    assert not torch.allclose(want, stale)
    # and the statistics are parameters: whatever ships the policy ships them (a checkpoint, a copy)
    assert {"obs_norm.mean", "obs_norm.var", "obs_norm.count"} <= set(dict(model.named_parameters()))


def test_env_worker_steps_pendulum_with_the_servers_float_actions(tmp_path):
    cfg = override(
        seed_recipe.mujoco(),
        **{"run.env": "Pendulum-v1", "algo.envs_per_worker": 4, "algo.unroll_length": 2, "net.hidden": (8,)},
    )
    worker = SeedEnvWorker(RoleContext(cfg, None, 1, {0: "learner", 1: "env_worker"}, Path(tmp_path)))
    torch.manual_seed(0)
    model = ActorCritic.for_env(env_info("Pendulum-v1"), cfg.net)
    server = InferenceServer(model, threading.Lock(), lambda: 0, cfg, [1], (3,), torch.device("cpu"), queue.Queue(4))
    try:
        msg = worker._first_message(0)
        for _ in range(3):
            action = _serve(server, msg, (3,))[ACTION]
            assert action.dtype == torch.float32 and action.shape == (2, 1)
            msg = worker._step(0, action * 100)  # far out of the box [-2, 2]: the vector env clips it
            assert msg[OBS].shape == (2, 3) and msg[REWARD].dtype == torch.float32
        assert isinstance(worker.envs[0], gym.wrappers.vector.ClipAction)
    finally:
        worker.watch.close()  # its env-step watch (run.env_step_timeout_s) started with the first step
        for env in worker.envs:
            env.close()


def test_mujoco_ids_start_from_the_mujoco_preset():
    from distrl.cli.options import default_experiment

    assert all(default_experiment("seed", e) == "mujoco" for e in MUJOCO_ENVS)
    cfg = seed_recipe.mujoco()
    assert cfg.run.env == "HalfCheetah-v5" and cfg.net.obs_norm == "auto" and cfg.algo.normalize_advantage
    assert cfg.algo.envs_per_group * cfg.algo.groups_per_worker == cfg.algo.envs_per_worker


# ---------------------------------------------------------------- one short run

#: what the run must beat random actions by, above an untrained policy's score (helpers.assert_beats_random):
#: 25k frames in batches of 4 unrolls scored 175, 1000, 194, 367, 163 and 94 in 6 runs (2 cores, load 5-9)
MARGIN = 30.0


@pytest.mark.timeout(180)
def test_inverted_pendulum_learns_past_a_random_policy(tmp_path, jobs):
    """The mujoco preset on InvertedPendulum-v5 in one process for 25k frames (Pendulum-v1 learns
    nothing in a test's budget), batches of 4 unrolls instead of 32 (8x the updates; at 32, 30k
    frames made 30 updates and a greedy 35): every role, the Gaussian head end to end, the summary
    written, and the last policy's greedy return beats uniformly random actions from the same initial
    states by :data:`MARGIN`."""
    pytest.importorskip("mujoco")
    run = tmp_path / "run"
    proc = jobs.train(
        [
            "seed",
            "--experiment",
            "mujoco",
            "--env",
            "InvertedPendulum-v5",
            "--total-frames",
            "25000",
            "--max-time-s",
            "60",
            "--run-dir",
            str(run),
            "--logger",
            "none",
            "--set",
            "algo.batch_size=4",
            "--set",
            "run.eval_episodes=10",
            "--set",
            "run.eval_interval_s=0",
        ],
        timeout=150,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["env"] == "InvertedPendulum-v5" and s["stop_reason"] == "total_frames" and s["learner_updates"] > 0
    assert s["episodes"] > 0 and math.isfinite(s["return_mean_100"])
    # obs (4 x 4 B) + reward (4) + done flags (2) in, one float32 action (4) out per env step, plus headers
    assert 26 <= s["bytes_per_env_step"] < 64, s["bytes_per_env_step"]
    assert_beats_random(s, MARGIN)
