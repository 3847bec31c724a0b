"""A3C with a Gaussian policy: actions float32 ``[B, T, A]`` through a worker's segment and its loss;
the loss and its gradient against a slow per-step loop in the paper's notation; the flat gradient
with zeros in the frozen ObsNorm statistics' slots; and observation normalisation at the parameter
server: the moments two workers push are merged there into the statistics of their observations
together, once each, and reach the workers inside the parameter vector. Then one short run on
Pendulum-v1 that must beat a random policy."""

from __future__ import annotations

import copy
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
from helpers import assert_beats_random, read_summary
from references import slow_a3c_loss
from test_a3c_units import make_server  # noqa: F401  (the fixture, used by name)

ROLES = {0: "parameter_server", 1: "worker", 2: "worker"}
ENV = "Pendulum-v1"  # obs 3, Box(-2, 2, (1,)): continuous and cheap


def pendulum(**changes):
    return override(a3c.default(), **{"run.env": ENV, "algo.envs_per_worker": 3, "algo.t_max": 5, **changes})


def worker_of(server: ParameterServer, rank: int, tmp_path) -> A3CWorker:
    return A3CWorker(RoleContext(server.cfg, server.ctx.transport.hub.endpoint(rank), rank, ROLES, tmp_path))


def step(server: ParameterServer) -> None:
    """One iteration of the server's loop."""
    batch = server.next_batch()
    if batch is not None:
        server.update(batch)


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
    recipe.check_config(
        override(a3c.mujoco(), **{"run.env": "Pendulum-v1", "algo.wire_dtype": "bfloat16", "net.obs_norm": "off"})
    )


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


def gaussian_segments(model, B: int = 4, T: int = 6, F: int = 5, seed: int = 0) -> TensorDict:
    """A ``[B, T]`` batch of segments with a termination (0, 2), a truncation (1, 3) and a termination
    at a segment's last step (2, T-1); float32 actions ``[B, T, A]`` drawn from ``model``."""
    g = torch.Generator().manual_seed(seed)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    term = torch.zeros(B, T, 1, dtype=torch.bool)
    for b, t, is_term in ((0, 2, True), (1, 3, False), (2, T - 1, True)):
        done[b, t], term[b, t] = True, is_term
    obs = torch.randn(B, T, F, generator=g)
    with torch.no_grad():
        action, _ = model.act(obs, g)
    return TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: action,
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: torch.randn(B, T, F, generator=g),
                    keys.STEP_REWARD: torch.randn(B, T, 1, generator=g),
                    keys.STEP_DONE: done,
                    keys.STEP_TERMINATED: term,
                },
                batch_size=[B, T],
            ),
        },
        batch_size=[B, T],
    )


@pytest.mark.parametrize("log_std,normalize", [("param", False), ("state", True)])
def test_gaussian_loss_and_gradient_match_the_papers_loop(log_std, normalize):
    """``a3c_loss`` under the Gaussian head against :func:`slow_a3c_loss`: the n-step returns by
    Algorithm S3's backward loop, ``log N(a; mu, sigma)`` and the entropy from the density's formula,
    one sample at a time, in float64. Every scalar and every gradient agree.

    Tolerance: float32's unit roundoff is 6e-8; each compared value passes through the network
    (two 64-wide layers), the log-density, and a mean over 24 samples, a few hundred roundings at
    the worst, so rtol 1e-5 (~150 roundoffs) bounds float32 against float64 (measured: <= 1.7e-6).
    A gradient element that cancels to near zero keeps the absolute error of the terms it sums, so
    gradients also get atol 1e-5 of the largest element (measured: <= 2.3e-6 of it). A real slip
    (sigma for sigma^2, a missing 1/2, no bootstrap at a truncation) moves these by 1e-2 or more."""
    torch.manual_seed(0)
    from distrl.config import NetConfig
    from distrl.nn.models import ActorCritic

    model = ActorCritic(5, None, NetConfig(log_std=log_std, init_log_std=-0.5, obs_norm="off"), action_dim=2)
    with torch.no_grad():  # a spread-out policy and critic: mean, std and value move with the state
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    batch = gaussian_segments(model)
    hp = SimpleNamespace(gamma=0.9, value_coef=0.5, entropy_coef=0.01, normalize_advantage=normalize, reward_scale=0.5)
    out = a3c_loss(model, batch, hp)
    trained = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(out[keys.LOSS], trained)
    ref = copy.deepcopy(model).double()
    want = slow_a3c_loss(ref, batch, hp)
    want_grads = torch.autograd.grad(want["loss"], [p for p in ref.parameters() if p.requires_grad])
    for name in ("loss", "loss_policy", "loss_value", "entropy", "advantage_mean"):
        torch.testing.assert_close(
            out[name].double(), want[name].detach(), rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
        )
    scale = max(float(w.abs().max()) for w in want_grads)
    for got, w in zip(grads, want_grads):
        torch.testing.assert_close(got.double(), w, rtol=1e-5, atol=1e-5 * scale)


def test_two_workers_moments_merge_at_the_server_into_the_statistics_of_both(make_server, tmp_path):
    """Both workers push from version 0; each applied gradient folds its moments in. Their frozen
    slots carry garbage here: the server ignores them (the optimizer does not hold them)."""
    server = make_server(pendulum())
    norm = server.model.obs_norm
    assert all(p.requires_grad for g in server.optim.param_groups for p in g["params"])
    g = torch.Generator().manual_seed(0)
    obs = [torch.randn(7, 4, 3, generator=g) * 5 + 3, torch.randn(2, 9, 3, generator=g) * 0.5 - 1]
    for rank, o in zip((1, 2), obs):
        server._push(
            TensorDict(
                {
                    keys.GRADIENT: torch.full((server.num_params,), 1.0),
                    keys.POLICY_VERSION: torch.tensor(0),
                    keys.FRAMES: torch.tensor(o.shape[0] * o.shape[1]),
                    keys.WORKER_RANK: torch.tensor(rank),
                    keys.EPISODE_RETURNS: torch.tensor([]),
                    keys.EPISODE_LENGTHS: torch.tensor([], dtype=torch.int64),
                    keys.WORKER_STATS: TensorDict(entropy=torch.tensor(0.5)),
                    keys.OBS_MOMENTS: batch_moments(o),
                }
            )
        )
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
    server._push(
        TensorDict(
            {
                keys.GRADIENT: torch.zeros(server.num_params),
                keys.POLICY_VERSION: torch.tensor(0),
                keys.FRAMES: torch.tensor(4),
                keys.WORKER_RANK: torch.tensor(1),
                keys.EPISODE_RETURNS: torch.tensor([]),
                keys.EPISODE_LENGTHS: torch.tensor([], dtype=torch.int64),
                keys.WORKER_STATS: TensorDict(),
            }
        )
    )
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
        assert server.version == (2 if sync else 4) and float(server.model.obs_norm.count) == pytest.approx(
            60, abs=1e-3
        )
    finally:
        for w in workers:
            w.runner.close()


#: what the run must beat random actions by, above an untrained policy's score (helpers.assert_beats_random):
#: 20k frames scored 217, 127, 118, 107, 167, 186 and 89 in 7 runs (16k: 42-57) (2 cores, load 5-9)
MARGIN = 30.0


@pytest.mark.timeout(180)
def test_inverted_pendulum_learns_past_a_random_policy(tmp_path, jobs):
    """The mujoco preset on InvertedPendulum-v5 (server and two workers in one process) for 20k frames
    (Pendulum-v1 learns nothing in a test's budget): it ends on its frame budget, writes its summary,
    and its last policy's greedy return beats uniformly random actions from the same initial states
    by :data:`MARGIN`."""
    pytest.importorskip("mujoco")
    run = tmp_path / "run"
    proc = jobs.train(
        [
            "a3c",
            "--experiment",
            "mujoco",
            "--env",
            "InvertedPendulum-v5",
            "--total-frames",
            "20000",
            "--max-time-s",
            "60",
            "--run-dir",
            str(run),
            "--logger",
            "none",
            "--set",
            "algo.envs_per_worker=8",
            "--set",
            "run.eval_episodes=10",
            "--set",
            "run.eval_interval_s=0",
        ],
        timeout=150,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["stop_reason"] == "total_frames" and s["env_frames"] > 0 and s["learner_updates"] > 0
    assert s["episodes"] > 0 and math.isfinite(s["return_mean_100"])
    assert_beats_random(s, MARGIN)
