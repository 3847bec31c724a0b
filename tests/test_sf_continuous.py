"""Sample Factory with continuous actions: float32 ``[A]`` actions through the shared slots, the
inference rank and the rollout worker; the APPO loss and its gradient under the Gaussian head
against a slow per-sample loop in the papers' notation; observation-normalisation statistics folded
in at the learner after its step and reaching inference inside the flat parameter vector; the
``mujoco`` preset for every MuJoCo id; and one short run on Pendulum-v1 that must beat a random
policy."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.appo import appo_loss
from distrl.config import override
from distrl.data import keys
from distrl.nn.heads import GaussianParams
from distrl.logging.timing import TimeBudget
from distrl.nn.models import ActorCritic
from distrl.recipes import get_recipe
from distrl.recipes.base import MUJOCO_ENVS, RoleContext
from distrl.recipes.sf import recipe as sf_recipe
from distrl.recipes.sf.recipe import debug
from distrl.recipes.sf.slots import PARAM_VERSION, rollout_layout
from distrl.transport.local import LocalHub
from helpers import assert_beats_random, read_summary
from references import slow_appo_loss

ENV = "Pendulum-v1"  # obs 3, action Box(-2, 2, (1,)): continuous and cheap


# ---------------------------------------------------------------- the slots


def test_slots_hold_float32_action_vectors_for_a_box_and_int64_indices_otherwise():
    cont = rollout_layout(3, 4, 5, 17, 10, action_shape=(6,), action_dtype=torch.float32)
    disc = rollout_layout(3, 4, 5, 17, 10)
    assert cont["traj", keys.ACTION].shape == (3, 4, 5, 6) and cont["traj", keys.ACTION].dtype == torch.float32
    assert disc["traj", keys.ACTION].shape == (3, 4, 5) and disc["traj", keys.ACTION].dtype == torch.int64
    assert cont["traj", keys.ACTION_LOG_PROB].shape == (3, 4, 5)  # one log-prob per step, summed over A


# ---------------------------------------------------------------- the APPO loss


def gaussian_batch(model: ActorCritic, B: int = 4, T: int = 6, F: int = 3, seed: int = 0) -> TensorDict:
    """Whole unrolls (a termination, a truncation) with float32 actions ``[B, T, A]`` drawn from the
    model and behaviour log-probs off by ``U(-0.6, 0.6)`` (lagged data)."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(B, T, F, generator=g)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    term = torch.zeros(B, T, 1, dtype=torch.bool)
    done[0, 2], term[0, 2], done[1, 3] = True, True, True
    next_obs = torch.cat([obs[:, 1:], torch.randn(B, 1, F, generator=g)], dim=1)
    next_obs[0, 2], next_obs[1, 3] = torch.randn(F, generator=g), torch.randn(F, generator=g)
    with torch.no_grad():
        action, log_mu = model.head.sample(model.policy(obs), g)
    log_mu = log_mu + (torch.rand(B, T, generator=g) * 2 - 1) * 0.6
    return TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: action,
            keys.ACTION_LOG_PROB: log_mu,
            keys.POLICY_VERSION: torch.zeros(B, T, dtype=torch.int64),
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: next_obs,
                    "reward": torch.randn(B, T, 1, generator=g),
                    "done": done,
                    "terminated": term,
                },
                batch_size=[B, T],
            ),
        },
        batch_size=[B, T],
    )


@pytest.mark.parametrize("vtrace", [True, False])
def test_appo_loss_under_the_gaussian_head_matches_the_per_sample_loop(vtrace):
    """Every scalar and every gradient of ``appo_loss`` under the Gaussian head against
    :func:`slow_appo_loss`: ``log N(a; mu, sigma)`` and the entropy from the density's formula, the
    V-trace or GAE targets by their loops, PPO's clipped objective sample by sample, in float64, on
    lagged data (ratios clipped both ways).

    Tolerance: float32's unit roundoff is 6e-8; a compared value passes through the network (two
    64-wide layers), the log-density, an exp for the ratio and a mean over 24 samples, a few hundred
    roundings at the worst: rtol 1e-5 (~150 roundoffs; measured <= 3.2e-7). A gradient element that
    cancels to near zero keeps the absolute error of the terms it sums: atol 1e-5 of the largest
    element (measured <= 2.2e-7 of it). No ratio sits
    within 1e-3 of a clip edge, where float32 and float64 could choose different branches."""
    algo = override(
        debug(), **{"algo.vtrace": vtrace, "algo.normalize_advantage": True, "algo.entropy_coef": 0.01}
    ).algo
    torch.manual_seed(0)
    model = ActorCritic(3, None, action_dim=2)
    with torch.no_grad():  # a spread-out policy: the mean moves with the state, the std differs per dim
        next(m for m in model.modules() if isinstance(m, GaussianParams)).log_std.copy_(torch.tensor([-0.5, 0.3]))
    batch = gaussian_batch(model)
    assert batch[keys.ACTION].dtype == torch.float32 and batch[keys.ACTION].shape == (4, 6, 2)
    out = appo_loss(model, batch, algo)
    trained = lambda m: [p for p in m.parameters() if p.requires_grad]  # noqa: E731  (not ObsNorm's statistics)
    grads = torch.autograd.grad(out["loss"], trained(model))
    ref = copy.deepcopy(model).double()
    want = slow_appo_loss(ref, batch, algo)
    expected = torch.autograd.grad(want["loss"], trained(ref))
    eps = algo.clip_eps
    assert min(abs(abs(x - 1) - eps) for x in want["ratios"]) > 1e-3
    assert 0 < float(out["clip_fraction"]) < 1
    for name in (
        "loss",
        "loss_policy",
        "loss_value",
        "entropy",
        "approx_kl",
        "clip_fraction",
        "advantage_std",
        "value_mean",
    ):
        torch.testing.assert_close(
            out[name].double(), want[name].detach(), rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
        )
    scale = max(float(w.abs().max()) for w in expected)
    for got, w in zip(grads, expected):
        torch.testing.assert_close(got.double(), w, rtol=1e-5, atol=1e-5 * scale)
    # the entropy is the Normal's, summed over the action's dims, whatever the state
    assert float(out["entropy"]) == pytest.approx(
        sum(0.5 + 0.5 * math.log(2 * math.pi) + s for s in (-0.5, 0.3)), rel=1e-6
    )


# ---------------------------------------------------------------- learner and inference


def _cfg(**more):
    return override(debug(), **{"run.env": ENV, "run.logger": "none", **more})  # 2 groups of 8 envs, 20 steps


def _learner(tmp_path, **more):
    from distrl.recipes.sf.learner import SFLearner

    cfg = _cfg(**more)
    roles = dict(enumerate(get_recipe("sf").roles_for_config(3, cfg)))  # learner, inference, worker
    hub = LocalHub(3)
    return SFLearner(RoleContext(cfg, hub.endpoint(0), 0, roles, tmp_path)), hub, cfg, roles


def _inference(cfg, roles, hub, shared):
    from distrl.recipes.sf.inference import SFInference

    inference = SFInference(RoleContext(cfg, hub.endpoint(1), 1, roles, Path(".")))
    inference.shared = shared
    return inference


def _rows(learner, seed: int = 0) -> TensorDict:
    """A batch ``[N, T]`` as the slots hold it, observations far from the initial statistics."""
    batch = learner.traj[:2].clone().reshape(-1, learner.traj.shape[2])[: learner.algo.batch_size]
    g = torch.Generator().manual_seed(seed)
    batch[keys.OBSERVATION] = torch.randn(batch[keys.OBSERVATION].shape, generator=g) * 3.0 + 5.0
    batch[keys.NEXT_OBSERVATION] = torch.cat([batch[keys.OBSERVATION][:, 1:], batch[keys.OBSERVATION][:, -1:]], 1)
    batch[keys.ACTION] = torch.randn(batch[keys.ACTION].shape, generator=g)
    batch[keys.NEXT, keys.STEP_REWARD] = torch.randn(batch[keys.NEXT, keys.STEP_REWARD].shape, generator=g)
    return batch


def test_learner_folds_observations_in_after_its_step_and_inference_receives_the_statistics(tmp_path):
    """The learner's slots hold float32 ``[A]`` actions; an update folds the batch's observations
    into ObsNorm after the optimizer step (the step saw the old statistics); the flat parameter
    vector it publishes carries them, and an inference rank's model holds them after its refresh,
    with the weights of the same version."""
    learner, hub, cfg, roles = _learner(tmp_path)
    try:
        norm = learner.model.obs_norm
        assert norm is not None and learner.model.head.continuous
        assert learner.traj[keys.ACTION].dtype == torch.float32 and learner.traj[keys.ACTION].shape[-1] == 1
        inference = _inference(cfg, roles, hub, learner.shared)
        assert inference.fast is None and inference.model.obs_norm is not None  # numpy path: discrete only
        seen = []
        step = learner.optim.step
        learner.optim.step = lambda *a, **k: (seen.append(float(norm.count)), step(*a, **k))[1]
        batch = _rows(learner)
        learner.update(batch)
        assert seen == [pytest.approx(1e-4)]  # the step trained under the statistics the batch was acted with
        assert float(norm.count) == pytest.approx(batch.numel() + 1e-4)
        obs = batch[keys.OBSERVATION].reshape(-1, batch[keys.OBSERVATION].shape[-1]).double()
        torch.testing.assert_close(norm.mean.double(), obs.mean(0), rtol=1e-4, atol=1e-4)
        inference._refresh_params()
        assert inference.version == learner.session.tracker.updates == 1
        got = dict(inference.model.named_parameters())
        for name, p in learner.model.named_parameters():
            torch.testing.assert_close(got[name], p.detach(), rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")
        assert float(inference.model.obs_norm.count) == float(norm.count)
        x = torch.randn(5, 3)
        torch.testing.assert_close(inference.model.policy(x), learner.model.policy(x).detach())
    finally:
        learner.bell.close()
        learner._maybe_unlink(force=True)


def test_epochs_and_minibatches_step_on_every_row_once_a_pass_then_fold_and_publish_once(tmp_path):
    """``algo.num_epochs`` x ``algo.num_minibatches`` optimizer steps per batch, each pass a
    shuffled partition of the batch's whole rows; the statistics are folded in once, after the
    last step, and the published version counts every step."""
    learner, hub, cfg, roles = _learner(tmp_path, **{"algo.num_epochs": 3, "algo.num_minibatches": 2})
    try:
        from distrl.recipes.sf import learner as learner_module

        seen, loss = [], learner_module.appo_loss
        learner_module.appo_loss = lambda model, rows, algo: (
            seen.append(rows[keys.OBSERVATION][:, 0].clone()),
            loss(model, rows, algo),
        )[1]
        counts = []
        step = learner.optim.step
        learner.optim.step = lambda *a, **k: (counts.append(float(learner.model.obs_norm.count)), step(*a, **k))[1]
        batch = _rows(learner)
        learner.update(batch)
        assert len(seen) == 6 and counts == [pytest.approx(1e-4)] * 6  # statistics untouched until the last step
        rows = batch[keys.OBSERVATION][:, 0]  # [N, F]: one row's first observation names it
        for epoch in range(3):
            got = torch.cat(seen[2 * epoch : 2 * epoch + 2])
            assert got.shape == rows.shape
            assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, rows.tolist()))  # each row once a pass
        assert float(learner.model.obs_norm.count) == pytest.approx(batch.numel() + 1e-4)
        assert learner.session.tracker.updates == 6
        assert int(learner.control[PARAM_VERSION]) == 6
    finally:
        learner_module.appo_loss = loss
        learner.bell.close()
        learner._maybe_unlink(force=True)


def test_inference_writes_float32_actions_whose_log_probs_are_the_normal_ones(tmp_path):
    """A batch of two requests: actions ``[B, A]`` float32 written at each request's slot and step,
    log-probs ``log N(a; mean, std)`` summed over ``A``, the policy version stamped."""
    from distrl.recipes.sf.inference import SlotRequest

    learner, hub, cfg, roles = _learner(tmp_path)
    try:
        inference = _inference(cfg, roles, hub, learner.shared)
        answered = []
        inference.bell = SimpleNamespace(answer=lambda rank, group, status=0: answered.append((rank, group)))
        traj = {
            k: learner.traj[k].numpy()
            for k in (keys.OBSERVATION, keys.ACTION, keys.ACTION_LOG_PROB, keys.POLICY_VERSION)
        }
        B = cfg.algo.envs_per_group
        learner.traj[keys.OBSERVATION][1, :, 3] = torch.randn(B, 3)
        learner.traj[keys.OBSERVATION][2, :, 0] = torch.randn(B, 3)
        inference.version = 7
        with torch.no_grad():  # as its loop runs it
            inference._serve([SlotRequest(2, 0, 1, 3, B), SlotRequest(2, 1, 2, 0, B)], traj)
        assert answered == [(2, 0), (2, 1)]
        for s, t in ((1, 3), (2, 0)):
            action = learner.traj[keys.ACTION][s, :, t]
            assert action.shape == (B, 1) and action.dtype == torch.float32 and action.std() > 0
            with torch.no_grad():
                out = inference.model.policy(learner.traj[keys.OBSERVATION][s, :, t])
            want = torch.distributions.Normal(out[:, :1], out[:, 1:].exp()).log_prob(action).sum(-1)
            torch.testing.assert_close(learner.traj[keys.ACTION_LOG_PROB][s, :, t], want, rtol=1e-5, atol=1e-5)
            assert (learner.traj[keys.POLICY_VERSION][s, :, t] == 7).all()
    finally:
        learner.bell.close()
        learner._maybe_unlink(force=True)


# ---------------------------------------------------------------- the rollout worker


class _Env:
    """A vector env that records the actions it is stepped with."""

    def __init__(self, B: int):
        self.B, self.actions = B, []

    def step(self, action):
        self.actions.append(np.array(action))
        z = np.zeros(self.B, dtype=bool)
        return np.ones((self.B, 3), np.float32), np.full(self.B, -1.0), z, z, {}


def test_rollout_worker_steps_its_envs_with_the_float_actions_inference_wrote():
    from distrl.recipes.sf.rollout_worker import SFRolloutWorker, _Group
    from distrl.roles.env_recovery import StepWatch

    S, B, T, A = 2, 3, 4, 2
    w = SFRolloutWorker.__new__(SFRolloutWorker)
    w.ctx, w.algo = SimpleNamespace(rank=2), SimpleNamespace(unroll_length=T, slot_timeout_s=1.0)
    w.recovery = SimpleNamespace(failures=0, succeeded=lambda: None)
    w.watch = StepWatch("test-env", 0.0, "rollout_worker 2")  # no step bound
    w.budget, w.steps, w.num_slots = TimeBudget(), 1, S
    layout = rollout_layout(S, B, T, 3, 1, 4, action_shape=(A,), action_dtype=torch.float32)["traj"]
    nxt = layout[keys.NEXT]
    w.buf = {
        keys.OBSERVATION: layout[keys.OBSERVATION].numpy(),
        keys.ACTION: layout[keys.ACTION].numpy(),
        keys.NEXT_OBSERVATION: nxt[keys.OBSERVATION].numpy(),
        **{
            k: nxt[k].numpy()[..., 0]
            for k in (keys.STEP_REWARD, keys.STEP_TERMINATED, keys.STEP_TRUNCATED, keys.STEP_DONE, keys.EPISODE_RETURN)
        },
    }
    w.stop_flag, w.evicted_flag = np.zeros(1, np.int64), np.zeros(4, np.int64)
    env = _Env(B)
    w.groups = [_Group(env, np.zeros((B, 3), np.float32), 1, None)]
    layout[keys.ACTION][1, :, 0] = torch.arange(B * A, dtype=torch.float32).view(B, A) / 10
    assert w._step(0)
    assert env.actions[0].dtype == np.float32 and env.actions[0].shape == (B, A)
    np.testing.assert_array_equal(env.actions[0], layout[keys.ACTION][1, :, 0].numpy())
    assert (layout[keys.NEXT, keys.STEP_REWARD][1, :, 0] == -1.0).all() and w.groups[0].t == 1


# ---------------------------------------------------------------- the preset


def test_every_mujoco_id_starts_from_the_mujoco_preset_and_it_passes_the_recipe_checks():
    from distrl.cli.options import default_experiment

    assert all(default_experiment("sf", e) == "mujoco" for e in MUJOCO_ENVS)
    cfg = sf_recipe.mujoco()
    a = cfg.algo
    assert cfg.run.env == "HalfCheetah-v5" and a.lr == 3e-4 and a.gamma == 0.99 and a.normalize_advantage
    for env in ("HalfCheetah-v5", "InvertedPendulum-v5"):
        get_recipe("sf").check_config(override(cfg, **{"run.env": env}))


# ---------------------------------------------------------------- end to end

#: what the run must beat random actions by, above an untrained policy's score (helpers.assert_beats_random):
#: 20k frames in batches of 16 unrolls of 16 steps scored 297, 283, 548, 155, 200 and 246 in 6 runs (2
#: cores, load 5-9)
MARGIN = 30.0


@pytest.mark.timeout(180)
def test_inverted_pendulum_learns_past_a_random_policy(tmp_path, jobs):
    """The mujoco preset on InvertedPendulum-v5 at world size 1 (learner, inference, two workers in
    one process) for 20k frames, batches of 16 unrolls of 16 steps instead of 32 x 32 (4x the
    updates; Pendulum-v1 learns nothing in a test's budget): it ends on its frame budget, writes
    its summary, and its last policy's greedy return beats uniformly random actions from the same
    initial states by :data:`MARGIN`."""
    pytest.importorskip("mujoco")
    run = tmp_path / "run"
    proc = jobs.train(
        [
            "sf",
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
            "algo.unroll_length=16",
            "--set",
            "algo.batch_size=16",
            "--set",
            "run.eval_episodes=10",
            "--set",
            "run.eval_interval_s=0",
        ],
        timeout=150,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["stop_reason"] == "total_frames" and s["learner_updates"] > 0, s
    assert s["episodes"] > 0 and math.isfinite(s["return_mean_100"]), s
    assert_beats_random(s, MARGIN)
