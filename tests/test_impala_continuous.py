"""IMPALA on continuous actions: a Gaussian policy's actions, log-probabilities and observation
statistics through the recipe's actor, wire, learner and loss; and one short run on
InvertedPendulum-v5 that must beat a random policy.

V-trace is checked against the slow loop of Espeholt et al. (2018), eq. (1):
    v_s = V(x_s) + sum_{t>=s} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V
    delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
with rho_t = min(rho_bar, pi/mu), c_i = min(c_bar, pi/mu), and here
    pi/mu = exp(log pi(a_t|x_t) - log mu(a_t|x_t)),
    log pi(a|x) = sum_j log N(a_j; mean_j(x), std_j(x)^2)  (torch.distributions.Normal, summed over A).
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict
from torch.distributions import Normal

from distrl.algorithms.impala import impala_loss
from distrl.config import NetConfig, override
from distrl.data import keys
from distrl.data.compact import pack_trajectory, unpack_trajectory
from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic
from distrl.recipes.base import MUJOCO_ENVS, RoleContext
from distrl.recipes.impala import recipe as impala
from distrl.recipes.impala.actor import ImpalaActor, wire_message
from distrl.recipes.impala.learner import ImpalaLearner
from distrl.transport.local import LocalHub
from references import slow_vtrace_targets

ROLES = {0: "learner", 1: "actor"}
ENV = "Pendulum-v1"  # obs [3], a Box(-2, 2, (1,)): continuous and cheap (no episode terminates: 200-step limit)


def normal_log_prob(model: ActorCritic, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """``log pi(a|x) [*B]`` by ``torch.distributions.Normal`` over the policy's mean and std, summed over A."""
    mean, log_std = model.head.split(model.policy(obs))
    return Normal(mean, log_std.exp()).log_prob(action).sum(-1)


def gaussian_model(obs_dim: int, action_dim: int, seed: int) -> ActorCritic:
    """A Gaussian actor-critic whose mean, std and value all depend on the state (its last layers not damped)."""
    torch.manual_seed(seed)
    model = ActorCritic(obs_dim, None, NetConfig(log_std="state", obs_norm="off"), action_dim)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def continuous_batch(B=3, T=9, F=4, A=2, seed=0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(B, T, 1, generator=g) < 0.2
    term = done & (torch.rand(B, T, 1, generator=g) < 0.5)  # some ends are truncations
    return TensorDict(
        {
            keys.OBSERVATION: torch.randn(B, T, F, generator=g),
            keys.ACTION: torch.randn(B, T, A, generator=g),
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


# ---- the math ---------------------------------------------------------------------------------


def test_gaussian_head_log_probs_are_normal_log_probs():
    model = gaussian_model(4, 3, seed=0)
    obs = torch.randn(5, 7, 4)
    out = model.policy(obs)
    action, sampled_lp = model.head.sample(out, torch.Generator().manual_seed(1))
    assert action.shape == (5, 7, 3) and action.dtype == torch.float32 and sampled_lp.shape == (5, 7)
    want = normal_log_prob(model, obs, action)
    torch.testing.assert_close(sampled_lp, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.head.log_prob(out, action), want, atol=1e-5, rtol=1e-5)
    mean, log_std = model.head.split(out)
    torch.testing.assert_close(model.head.entropy(out), Normal(mean, log_std.exp()).entropy().sum(-1))


@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (1.2, 0.9)])
def test_vtrace_on_gaussian_actions_matches_the_slow_loop(rho_bar, c_bar):
    """``impala_loss``'s value and policy terms on ``[B, T, A]`` actions, against eq. (1) run per env
    in python with ratios from ``torch.distributions.Normal``: target ``pi`` the trained model,
    behaviour ``mu`` a perturbed copy of it (so that the ratios are neither 1 nor all clipped)."""
    pi = gaussian_model(4, 2, seed=0)
    mu = copy.deepcopy(pi)
    with torch.no_grad():
        for p in mu.parameters():
            p.add_(0.05 * torch.randn_like(p))
    batch = continuous_batch()
    obs, action = batch[keys.OBSERVATION], batch[keys.ACTION]
    with torch.no_grad():
        batch[keys.ACTION_LOG_PROB] = normal_log_prob(mu, obs, action)
    hp = SimpleNamespace(
        gamma=0.97,
        rho_bar=rho_bar,
        c_bar=c_bar,
        value_coef=0.5,
        entropy_coef=0.01,
        normalize_advantage=False,
        reward_scale=0.5,
    )
    got = impala_loss(pi, batch, hp)

    with torch.no_grad():
        log_pi = normal_log_prob(pi, obs, action).double()
        ratio = (log_pi - batch[keys.ACTION_LOG_PROB].double()).exp()
        V, V_next = pi.value(obs)[..., 0].double(), pi.value(batch[keys.NEXT_OBSERVATION])[..., 0].double()
    r = batch[keys.REWARD][..., 0].double() * hp.reward_scale
    done, term = batch[keys.DONE][..., 0], batch[keys.TERMINATED][..., 0]
    B, T = batch.batch_size
    value_sq, policy = 0.0, 0.0
    ratios_seen = []
    for b in range(B):
        ratio_b = ratio[b].tolist()
        ratios_seen += ratio_b
        v = slow_vtrace_targets(
            hp.gamma,
            ratio_b,
            V[b].tolist(),
            V_next[b].tolist(),
            r[b].tolist(),
            done[b].tolist(),
            term[b].tolist(),
            rho_bar,
            c_bar,
        )
        for s in range(T):
            v_next = V_next[b, s].item() if done[b, s] or s == T - 1 else v[s + 1]  # v_{s+1}
            adv = min(rho_bar, ratio_b[s]) * (
                r[b, s].item() + hp.gamma * (0.0 if term[b, s] else v_next) - V[b, s].item()
            )
            policy -= adv * log_pi[b, s].item()
            value_sq += (v[s] - V[b, s].item()) ** 2
    assert min(ratios_seen) < 0.9 and max(ratios_seen) > 1.1  # the truncations are exercised
    torch.testing.assert_close(
        got["loss_value"].double(), torch.tensor(0.5 * value_sq / (B * T), dtype=torch.float64), atol=1e-5, rtol=1e-4
    )
    torch.testing.assert_close(
        got["loss_policy"].double(), torch.tensor(policy / (B * T), dtype=torch.float64), atol=1e-5, rtol=1e-4
    )
    torch.testing.assert_close(got["entropy"], pi.head.entropy(pi.policy(obs)).mean())
    assert math.isfinite(float(got[keys.LOSS].detach()))


def test_float_actions_pack_and_unpack_unchanged():
    batch = continuous_batch()
    batch[keys.ACTION_LOG_PROB] = torch.randn(batch.batch_size)
    batch[keys.NEXT, keys.STEP_TRUNCATED] = batch[keys.DONE] & ~batch[keys.TERMINATED]
    packed = pack_trajectory(batch)
    assert packed[keys.TRAJ, keys.ACTION].dtype == torch.float32  # not narrowed as discrete actions are
    got = unpack_trajectory(packed)
    assert got[keys.ACTION].dtype == torch.float32 and torch.equal(got[keys.ACTION], batch[keys.ACTION])


# ---- the roles --------------------------------------------------------------------------------


@pytest.fixture
def hub():
    h = LocalHub(2)
    yield h
    h.pool.shutdown(wait=True, cancel_futures=True)


def pendulum_config():
    return override(
        impala.mujoco(),
        **{
            "run.env": ENV,
            "run.logger": "none",
            "run.eval_episodes": 0,
            "algo.envs_per_actor": 4,
            "algo.unroll_length": 16,
        },
    )


@pytest.fixture
def learner(hub, tmp_path):
    made = ImpalaLearner(RoleContext(pendulum_config(), hub.endpoint(0), 0, ROLES, tmp_path))
    yield made
    if made.session.tracker.writer is not None:
        made.session.tracker.writer.close()


@pytest.fixture
def actor(hub, tmp_path):
    made = ImpalaActor(RoleContext(pendulum_config(), hub.endpoint(1), 1, ROLES, tmp_path))
    yield made
    made.runner.close()


def test_the_mujoco_preset_serves_every_mujoco_id():
    from distrl.cli.options import default_experiment

    assert all(default_experiment("impala", e) == "mujoco" for e in MUJOCO_ENVS)
    cfg = override(impala.mujoco(), **{"run.env": "InvertedPendulum-v5"})
    impala.RECIPE.check_config(cfg)  # continuous actions are accepted
    assert cfg.algo.normalize_advantage and cfg.algo.entropy_coef == 0.0


def test_the_actor_samples_float_actions_in_torch_and_ships_them_as_they_are(actor):
    assert actor.fast is None  # NumpyPolicy cannot run ObsNorm and GaussianParams
    assert actor.model.head.continuous and actor.model.obs_norm is not None
    msg = actor._unroll()
    traj = msg[keys.TRAJ]
    assert traj[keys.ACTION].shape == (4, 16, 1) and traj[keys.ACTION].dtype == torch.float32
    assert traj[keys.ACTION_LOG_PROB].shape == (4, 16)
    with torch.no_grad():  # the behaviour log-probabilities are the Normal's of the actor's own policy
        want = normal_log_prob(actor.model, traj[keys.OBSERVATION], traj[keys.ACTION])
    torch.testing.assert_close(traj[keys.ACTION_LOG_PROB], want, atol=1e-5, rtol=1e-5)
    wire = wire_message(msg)
    assert wire[keys.TRAJ, keys.TRAJ, keys.ACTION].dtype == torch.float32


def test_the_learner_queues_float_actions_and_refuses_discrete_ones(actor, learner, capsys):
    msg = actor._unroll()
    learner._put_trajectory(wire_message(msg))
    queued = learner.queue.get_nowait()[keys.TRAJ]
    sent = msg[keys.TRAJ]
    assert set(queued.keys(True, True)) == set(sent.keys(True, True))
    for k in sent.keys(True, True):  # Pendulum never terminates: every leaf comes back as sent
        assert queued[k].dtype == sent[k].dtype and torch.equal(queued[k], sent[k]), k
    wrong = msg.clone()
    wrong[keys.TRAJ, keys.ACTION] = torch.zeros(sent.batch_size, dtype=torch.int64)  # a discrete actor's
    learner._put_trajectory(wire_message(wrong))
    assert learner.queue.empty() and learner.session.tracker.counters["rejected_trajectories"] == 1
    line = next(line for line in capsys.readouterr().out.splitlines() if "rejected" in line)
    assert "action (4, 16) torch.int64, expected [B, T, 1] float32" in line


def test_obs_statistics_merge_after_the_step_and_reach_the_actor(actor, learner):
    """The learner folds a batch's observations into ``obs_norm`` after the optimizer step that trained
    on it (the step saw the statistics the actor acted with), and its next reply carries them."""
    actor._load(learner._hello(TensorDict()))
    msg = actor._unroll()
    learner._put_trajectory(wire_message(msg))
    batch = learner.next_batch()
    norm = learner.model.obs_norm
    count_at_step = []
    step = learner.optim.step
    learner.optim.step = lambda *a, **k: (count_at_step.append(float(norm.count)), step(*a, **k))[1]
    learner.update(batch)
    obs = batch[keys.OBSERVATION].reshape(-1, 3).double()
    assert count_at_step == [pytest.approx(1e-4)]  # not yet merged when the step ran
    assert float(norm.count) == pytest.approx(1e-4 + obs.shape[0])
    torch.testing.assert_close(norm.mean.double(), obs.mean(0), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(norm.var.double(), obs.var(0, unbiased=False), atol=1e-3, rtol=1e-3)

    before = actor.version
    actor._load(learner._reply(before))  # an actor one update behind gets the new parameters
    assert actor.version == before + 1
    for name in ("count", "mean", "var"):
        assert torch.equal(getattr(actor.model.obs_norm, name), getattr(norm, name)), name
    # and the actor's policy is the learner's: the same normalised input, the same Gaussian
    x = batch[keys.OBSERVATION][:, 0]
    with torch.no_grad():
        torch.testing.assert_close(actor.model.policy(x), learner.model.policy(x))


def test_evaluation_acts_with_the_gaussian_mean(learner, monkeypatch):
    seen = {}
    monkeypatch.setattr(learner.session, "greedy_returns", lambda policy, head=None: seen.update(head=head) or [0.0])
    learner.evaluate()
    assert seen["head"] is learner.model.head and seen["head"].continuous


def test_continuous_env_info_builds_the_gaussian_network():
    model = ActorCritic.for_env(env_info(ENV), pendulum_config().net)
    assert model.head.continuous and model.head.action_shape == (1,) and model.obs_norm is not None
    assert {"obs_norm.count", "obs_norm.mean", "obs_norm.var"} <= set(model.state_dict())  # shipped with the weights


# ---- end to end -------------------------------------------------------------------------------

#: what the run must beat random actions by, above an untrained policy's score (helpers.assert_beats_random):
#: 25k frames at unrolls of 16 scored 539, 240, 290, 129, 182 and 132 in 6 runs (2 cores, load 5-9)
MARGIN = 30.0


@pytest.mark.timeout(180)
def test_inverted_pendulum_learns_past_a_random_policy(tmp_path, jobs):
    """The mujoco preset on InvertedPendulum-v5 in one process for 25k frames, unrolls of 16 steps
    instead of 32 (twice the updates). Pendulum-v1 learns nothing in a test's budget: in 5 s every
    recipe's greedy policy stayed at random's -1100. It ends on its frame budget, writes its
    summary, and its last policy's greedy return beats uniformly random actions from the same
    initial states by :data:`MARGIN`."""
    from helpers import assert_beats_random, read_summary

    pytest.importorskip("mujoco")
    run = tmp_path / "run"
    proc = jobs.train(
        [
            "impala",
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
            "algo.unroll_length=16",
            "--set",
            "run.eval_episodes=10",
            "--set",
            "run.eval_interval_s=0",
        ],
        timeout=150,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["stop_reason"] == "total_frames" and s["learner_updates"] > 0 and s["episodes"] > 0, s
    assert math.isfinite(s["return_mean_100"])
    assert_beats_random(s, MARGIN)
