"""A3C with a Gaussian policy: actions float32 ``[B, T, A]`` through a worker's segment and its loss,
log-probabilities against ``torch.distributions.Normal``, the flat gradient with zeros in the frozen
ObsNorm statistics' slots, and observation normalisation at the parameter server: the moments two
workers push are merged there into the statistics of their observations together, once each, and
reach the workers inside the parameter vector. Then one short run on Pendulum-v1."""
from __future__ import annotations

import math

from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict
from torch.nn.utils import parameters_to_vector

from distrl.algorithms.a3c import a3c_loss
from distrl.config import override
from distrl.data import keys
from distrl.nn.heads import GaussianHead
from distrl.nn.numpy_policy import NumpyPolicy
from distrl.nn.obs_norm import ObsNorm, batch_moments
from distrl.recipes.a3c import recipe as a3c
from distrl.recipes.a3c.parameter_server import ParameterServer
from distrl.recipes.a3c.worker import A3CWorker
from distrl.recipes.base import MUJOCO_ENVS, RoleContext
from helpers import read_summary
from test_a3c_units import make_server  # noqa: F401  (the fixture, used by name)

ROLES = {0: "parameter_server", 1: "worker", 2: "worker"}
ENV = "Pendulum-v1"  # obs 3, Box(-2, 2, (1,)): continuous and cheap


def pendulum(**changes):
    return override(a3c.default(), **{"run.env": ENV, "algo.envs_per_worker": 3, "algo.t_max": 5, **changes})


def worker_of(server: ParameterServer, rank: int, tmp_path) -> A3CWorker:
    return A3CWorker(RoleContext(server.cfg, server.ctx.transport.hub.endpoint(rank), rank, ROLES, tmp_path))


def step(server: ParameterServer) -> None:
    """One iteration of the server's loop."""
    batch = server.next_gradients()
    if batch is not None:
        server.apply(batch)


def stats(norm: ObsNorm) -> tuple[torch.Tensor, ...]:
    return norm.count.detach().clone(), norm.mean.detach().clone(), norm.var.detach().clone()


def test_mujoco_preset_serves_every_mujoco_id():
    cfg = a3c.mujoco()
    from distrl.cli.options import default_experiment

    assert all(default_experiment("a3c", e) == "mujoco" for e in MUJOCO_ENVS)
    assert cfg.run.env == "HalfCheetah-v5" and cfg.algo.wire_dtype == "float32" and cfg.algo.normalize_advantage
    assert cfg.algo.entropy_coef == 0.0 and cfg.algo.optimizer == "adam"


def test_bfloat16_parameters_with_normalised_observations_are_refused():
    """The statistics travel inside the parameter vector; bfloat16 would round them to 3 digits."""
    from distrl.recipes import get_recipe

    recipe = get_recipe("a3c")
    with pytest.raises(ValueError, match="algo.wire_dtype=bfloat16 would round the observation statistics"):
        recipe.check_config(override(a3c.mujoco(), **{"run.env": "Pendulum-v1", "algo.wire_dtype": "bfloat16"}))
    recipe.check_config(override(a3c.mujoco(), **{"run.env": "Pendulum-v1", "algo.wire_dtype": "bfloat16",
                                                  "net.obs_norm": "off"}))


def test_a_segment_holds_float32_actions_and_the_message_its_moments(make_server, tmp_path):
    server = make_server(pendulum())
    worker = worker_of(server, 1, tmp_path)
    try:
        model = worker.model
        assert isinstance(model.head, GaussianHead) and model.obs_norm is not None
        assert not NumpyPolicy.supports(model.policy)  # the numpy fast path is discrete only
        assert not worker._pull() and worker.version == 0
        traj, returns, lengths = worker.act()
        B, T = 3, 5
        assert traj.batch_size == (B, T)
        assert traj[keys.ACTION].shape == (B, T, 1) and traj[keys.ACTION].dtype == torch.float32
        assert traj[keys.OBSERVATION].shape == (B, T, 3)
        msg = worker.gradient(traj, returns, lengths)
        grad = msg[keys.GRADIENT]
        assert grad.shape == (server.num_params,) and grad.dtype == torch.float32
        # the frozen statistics' slots are zeros (they lead the vector: obs_norm is registered first)
        frozen = sum(p.numel() for p in worker.params if not p.requires_grad)
        assert frozen == 1 + 2 * 3 and not grad[:frozen].any() and grad[frozen:].any()
        assert msg[keys.OBS_MOMENTS].dtype == torch.float64
        torch.testing.assert_close(msg[keys.OBS_MOMENTS], batch_moments(traj[keys.OBSERVATION]))
        assert msg[keys.OBS_MOMENTS][0] == B * T
    finally:
        worker.runner.close()


def test_gaussian_loss_log_probs_match_torch_normal():
    torch.manual_seed(0)
    from distrl.nn.models import ActorCritic
    from distrl.config import NetConfig

    model = ActorCritic(5, None, NetConfig(init_log_std=-0.5), action_dim=2)
    B, T = 4, 6
    obs = torch.randn(B, T, 5)
    action = torch.randn(B, T, 2)
    batch = TensorDict({
        keys.OBSERVATION: obs, keys.ACTION: action,
        keys.NEXT: TensorDict({keys.OBSERVATION: torch.randn(B, T, 5), keys.STEP_REWARD: torch.randn(B, T, 1),
                               keys.STEP_DONE: torch.zeros(B, T, 1, dtype=torch.bool),
                               keys.STEP_TERMINATED: torch.zeros(B, T, 1, dtype=torch.bool)}, batch_size=[B, T]),
    }, batch_size=[B, T])
    hp = SimpleNamespace(gamma=0.9, value_coef=0.5, entropy_coef=0.01, normalize_advantage=False, reward_scale=1.0)
    out = a3c_loss(model, batch, hp)
    params, value = model(obs)
    mean, log_std = params[..., :2], params[..., 2:]
    normal = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(out["entropy"], normal.entropy().sum(-1).mean().detach())
    with torch.no_grad():
        from distrl.algorithms.estimators import n_step_advantage

        advantage, _ = n_step_advantage(0.9, value, model.value(batch[keys.NEXT_OBSERVATION]), batch[keys.REWARD],
                                        batch[keys.DONE], batch[keys.TERMINATED])
    expected = -(advantage.squeeze(-1) * normal.log_prob(action).sum(-1)).mean()
    torch.testing.assert_close(out["loss_policy"], expected.detach())


def test_two_workers_moments_merge_at_the_server_into_the_statistics_of_both(make_server, tmp_path):
    """Both workers push from version 0; each applied gradient folds its moments in. Their frozen
    slots carry garbage here: the server ignores them (the optimizer does not hold them)."""
    server = make_server(pendulum())
    norm = server.model.obs_norm
    assert all(p.requires_grad for g in server.optim.param_groups for p in g["params"])
    g = torch.Generator().manual_seed(0)
    obs = [torch.randn(7, 4, 3, generator=g) * 5 + 3, torch.randn(2, 9, 3, generator=g) * 0.5 - 1]
    for rank, o in zip((1, 2), obs):
        server._push(TensorDict({
            keys.GRADIENT: torch.full((server.num_params,), 1.0), keys.POLICY_VERSION: torch.tensor(0),
            keys.FRAMES: torch.tensor(o.shape[0] * o.shape[1]), keys.WORKER_RANK: torch.tensor(rank),
            keys.EPISODE_RETURNS: torch.tensor([]), keys.EPISODE_LENGTHS: torch.tensor([], dtype=torch.int64),
            keys.WORKER_STATS: TensorDict(entropy=torch.tensor(0.5)), keys.OBS_MOMENTS: batch_moments(o)}))
    step(server)
    step(server)
    assert server.version == 2
    both = torch.cat([o.reshape(-1, 3) for o in obs]).double()
    count, mean, var = stats(norm)
    # the prior's count of 1e-4 (mean 0, var 1) moves the result by ~1e-4 / 46 of itself
    assert abs(float(count) - 46) < 1e-3
    torch.testing.assert_close(mean.double(), both.mean(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(var.double(), both.var(0, unbiased=False), rtol=1e-4, atol=1e-4)
    reference = ObsNorm(3)
    reference.update_batch(both)
    for a, b in zip(stats(norm), stats(reference)):
        torch.testing.assert_close(a, b)
    # ... and they are in the published vector, which is what workers load
    version, vector = server.board.published
    assert version == 2
    torch.testing.assert_close(vector, parameters_to_vector(server.model.parameters()).detach())


def test_a_push_without_moments_is_rejected(make_server):
    server = make_server(pendulum())
    server._push(TensorDict({
        keys.GRADIENT: torch.zeros(server.num_params), keys.POLICY_VERSION: torch.tensor(0),
        keys.FRAMES: torch.tensor(4), keys.WORKER_RANK: torch.tensor(1), keys.EPISODE_RETURNS: torch.tensor([]),
        keys.EPISODE_LENGTHS: torch.tensor([], dtype=torch.int64), keys.WORKER_STATS: TensorDict()}))
    assert server.queue.empty() and server.session.tracker.counters["rejected_gradients"] == 1


@pytest.mark.parametrize("sync", [False, True])
def test_workers_get_the_merged_statistics_and_count_their_data_once(make_server, tmp_path, sync):
    """Two real workers, two rounds: after each the server's statistics are those of every segment
    applied so far, and each worker pulls exactly those (a worker never folds its own in)."""
    server = make_server(pendulum(**{"algo.sync": sync}))
    workers = [worker_of(server, r, tmp_path) for r in (1, 2)]
    seen = []
    try:
        for w in workers:
            w._pull()
        for _ in range(2):
            for w in workers:
                traj, returns, lengths = w.act()
                seen.append(traj[keys.OBSERVATION])
                assert not w._load(w.ctx.transport.call_sync(0, "push", w.gradient(traj, returns, lengths), 5.0))
            step(server)
            if not sync:
                step(server)
            for w in workers:
                w._pull()
                assert w.version == server.version
                for a, b in zip(stats(w.model.obs_norm), stats(server.model.obs_norm)):
                    torch.testing.assert_close(a, b)
            reference = ObsNorm(3)
            reference.update_batch(torch.cat([o.reshape(-1, 3) for o in seen]))
            for a, b in zip(stats(server.model.obs_norm), stats(reference)):
                torch.testing.assert_close(a, b)
        assert server.version == (2 if sync else 4) and float(server.model.obs_norm.count) == pytest.approx(60, abs=1e-3)
    finally:
        for w in workers:
            w.runner.close()


@pytest.mark.timeout(120)
def test_pendulum_runs_to_its_end(tmp_path, jobs):
    run = tmp_path / "run"
    proc = jobs.train(["a3c", "--experiment", "mujoco", "--env", ENV, "--run-dir", str(run), "--max-time-s", "5",
                       "--logger", "none", "--set", "run.eval_episodes=2", "--set", "run.eval_interval_s=10",
                       "--set", "algo.envs_per_worker=8"], timeout=100)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["stop_reason"] == "max_time" and s["env_frames"] > 0 and s["learner_updates"] > 0
    assert s["episodes"] > 0  # Pendulum's episodes end at 200 steps
    assert math.isfinite(s["eval_return_mean"]) and math.isfinite(s["return_mean_100"])
    assert -2000 < s["eval_return_mean"] <= 0  # Pendulum's rewards lie in [-16.3, 0]
