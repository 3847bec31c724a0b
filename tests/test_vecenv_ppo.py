"""PPO math and its wiring in the vecenv learner, against slow loops in the paper's notation.

GAE: A_t = sum_l (gamma lambda)^l delta_{t+l}, delta_t = r_t + gamma V(s_{t+1}) (1 - term_t) - V(s_t),
the sum cut at any episode end (Schulman et al., 2016). Clipped surrogate:
L = -E[min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps) A_t)] (Schulman et al., 2017).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.estimators import gae
from distrl.algorithms.ppo import minibatches, ppo_loss
from distrl.recipes import get_recipe
from distrl.runtime.context import RoleContext
from distrl.config import NetConfig, override
from distrl.data import keys
from distrl.nn.models import ActorCritic
from distrl.recipes.vecenv.learner import VecEnvLearner
from distrl.recipes.vecenv.rollout import EpisodeStats
from distrl.recipes.vecenv.update import normalize_advantage, ppo_update


def slow_gae(gamma, lmbda, value, next_value, reward, done, terminated):
    """GAE per env, one step at a time, in floats. Inputs ``[T, B]``; returns ``(A, A + V)``."""
    t_len, b_len = value.shape
    adv = torch.zeros(t_len, b_len, dtype=torch.float64)
    for b in range(b_len):
        a = 0.0
        for t in reversed(range(t_len)):
            bootstrap = 0.0 if terminated[t, b] else gamma * float(next_value[t, b])
            delta = float(reward[t, b]) + bootstrap - float(value[t, b])
            a = delta + (0.0 if done[t, b] else gamma * lmbda * a)
            adv[t, b] = a
    return adv, adv + value.double()


def slow_clipped_loss(log_prob, old_log_prob, adv, value, target, entropy, eps, c_v, c_e, old_value=None):
    """The PPO objective sample by sample; with ``old_value``, ppo2's clipped value loss."""
    n = len(log_prob)
    surrogate = 0.0
    for i in range(n):
        rho = math.exp(float(log_prob[i]) - float(old_log_prob[i]))
        a = float(adv[i])
        surrogate += min(rho * a, min(max(rho, 1 - eps), 1 + eps) * a)
    value_loss = 0.0
    for i in range(n):
        v, v_targ = float(value[i]), float(target[i])
        loss = (v - v_targ) ** 2
        if old_value is not None:
            v_old = float(old_value[i])
            v_clipped = v_old + min(max(v - v_old, -eps), eps)
            loss = max(loss, (v_clipped - v_targ) ** 2)
        value_loss += 0.5 * loss / n
    return -surrogate / n + c_v * value_loss - c_e * float(entropy.mean())


def test_gae_matches_the_slow_loop_with_terminations_and_truncations():
    g = torch.Generator().manual_seed(0)
    t_len, b_len = 12, 5
    value, next_value, reward = (torch.randn(t_len, b_len, generator=g) for _ in range(3))
    terminated = torch.rand(t_len, b_len, generator=g) < 0.15
    truncated = (torch.rand(t_len, b_len, generator=g) < 0.15) & ~terminated
    done = terminated | truncated
    adv, target = gae(0.97, 0.9, value, next_value, reward, done, terminated)
    ref_adv, ref_target = slow_gae(0.97, 0.9, value, next_value, reward, done, terminated)
    torch.testing.assert_close(adv.double(), ref_adv, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(target.double(), ref_target, atol=1e-5, rtol=1e-5)


def test_clipped_objective_matches_the_slow_loop():
    g = torch.Generator().manual_seed(1)
    n = 64
    log_prob, adv, value, target = (torch.randn(n, generator=g) for _ in range(4))
    old = log_prob + 0.5 * torch.randn(n, generator=g)  # ratios well outside [0.8, 1.2]: clipping is live
    entropy = torch.rand(n, generator=g)
    out = ppo_loss(log_prob, old, adv, value, target, entropy, 0.2, 0.5, 0.01)
    ref = slow_clipped_loss(log_prob, old, adv, value, target, entropy, 0.2, 0.5, 0.01)
    assert out["loss"].item() == pytest.approx(ref, abs=1e-5)
    assert 0 < out["clip_fraction"].item() < 1


def test_clipped_value_loss_matches_the_slow_loop():
    """``old_value`` turns on ppo2's value clip: the loss differs from the plain one where the new
    value left ``old_value +- eps`` on the far side of the target, and equals the slow loop."""
    g = torch.Generator().manual_seed(2)
    n = 64
    log_prob, adv, value, target = (torch.randn(n, generator=g) for _ in range(4))
    old, old_value = log_prob + 0.5 * torch.randn(n, generator=g), value + 0.5 * torch.randn(n, generator=g)
    entropy = torch.rand(n, generator=g)
    out = ppo_loss(log_prob, old, adv, value, target, entropy, 0.2, 0.5, 0.01, old_value=old_value)
    ref = slow_clipped_loss(log_prob, old, adv, value, target, entropy, 0.2, 0.5, 0.01, old_value=old_value)
    assert out["loss"].item() == pytest.approx(ref, abs=1e-5)
    plain = ppo_loss(log_prob, old, adv, value, target, entropy, 0.2, 0.5, 0.01)
    assert out["loss_value"].item() > plain["loss_value"].item()


def test_loss_matches_torchrl_clip_ppo_loss():
    from tensordict.nn import TensorDictModule
    from torch.distributions import Categorical
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss

    torch.manual_seed(0)
    model = ActorCritic(4, 3)
    n = 32
    obs, action = torch.randn(n, 4), torch.randint(0, 3, (n,))
    old, adv, target = -1.1 + 0.3 * torch.randn(n), torch.randn(n), torch.randn(n)
    actor = ProbabilisticActor(
        TensorDictModule(model.policy, ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=Categorical,
        return_log_prob=True,
    )
    ref = ClipPPOLoss(
        actor,
        ValueOperator(model.value, in_keys=["observation"]),
        clip_epsilon=0.2,
        entropy_coeff=0.01,
        critic_coeff=0.5 * 0.5,
        loss_critic_type="l2",
        normalize_advantage=False,
    )
    td = TensorDict(
        {
            "observation": obs,
            "action": action,
            "action_log_prob": old,
            "advantage": adv.unsqueeze(-1),
            "value_target": target.unsqueeze(-1),
        },
        [n],
    )
    r = ref(td)
    log_prob, entropy, _ = model.evaluate(obs, action)
    out = ppo_loss(log_prob, old, adv, model.value(obs).squeeze(-1), target, entropy, 0.2, 0.5, 0.01)
    torch.testing.assert_close(out["loss_policy"], r["loss_objective"], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(0.5 * out["loss_value"], r["loss_critic"], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(-0.01 * out["entropy"], r["loss_entropy"], atol=1e-6, rtol=1e-5)


def test_minibatches_cover_every_row_once_per_epoch_and_keep_rows_whole():
    """PPO's epoch loop (vecenv's update and sf's learner both run it): each epoch a new permutation
    of the rows, cut as ``chunk`` cuts (the last piece smaller); a ``[N, T]`` row moves whole, nested
    keys with it; one minibatch is the batch itself, unshuffled."""
    n, t = 10, 3
    x = torch.arange(n * t).reshape(n, t)
    batch = TensorDict({"x": x, "next": {"y": x.float() + 0.5}}, [n, t])
    torch.manual_seed(0)
    seen = list(minibatches(batch, epochs=2, num_minibatches=3))
    assert [mb.batch_size for mb in seen] == [torch.Size([4, t]), torch.Size([4, t]), torch.Size([2, t])] * 2
    orders = []
    for epoch in (seen[:3], seen[3:]):
        rows = torch.cat([mb["x"] for mb in epoch])
        assert sorted(rows[:, 0].tolist()) == list(range(0, n * t, t))  # every row, once
        assert torch.equal(rows - rows[:, :1], torch.arange(t).expand(n, t))  # whole rows
        assert torch.equal(torch.cat([mb["next", "y"] for mb in epoch]), rows.float() + 0.5)
        orders.append(rows[:, 0])
    assert not torch.equal(orders[0], orders[1]) and not torch.equal(orders[0], x[:, 0])
    assert all(mb is batch for mb in minibatches(batch, epochs=2, num_minibatches=1))


def test_gaussian_policy_log_prob_and_entropy():
    torch.manual_seed(0)
    model = ActorCritic(3, None, NetConfig(init_log_std=-0.3), action_dim=2)
    obs = torch.randn(10, 3)
    action, log_prob = model.act(obs)
    mean, log_std = model.head.split(model.policy(obs))
    torch.testing.assert_close(log_std, torch.full_like(log_std, -0.3))  # state-independent: net.log_std=param
    dist = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(log_prob, dist.log_prob(action).sum(-1))
    lp, ent, _ = model.evaluate(obs, action)
    torch.testing.assert_close(lp, log_prob)
    torch.testing.assert_close(ent, dist.entropy().sum(-1))
    assert model.greedy(obs).shape == (10, 2)


def test_episode_stats_match_a_python_loop():
    g = torch.Generator().manual_seed(3)
    t_len, b_len = 9, 4
    reward = torch.rand(t_len, b_len, generator=g)
    done = torch.rand(t_len, b_len, generator=g) < 0.3
    stats = EpisodeStats(t_len, b_len, torch.device("cpu"), keep=5)
    for t in range(t_len):
        stats.step(t, reward[t], done[t])
    n, lengths, latest = EpisodeStats.unpack(stats.flush())
    ret, length, finished = [0.0] * b_len, [0] * b_len, []
    for t in range(t_len):  # time-major: the order episodes finish in
        for b in range(b_len):
            ret[b] += float(reward[t, b])
            length[b] += 1
            if done[t, b]:
                finished.append((ret[b], length[b]))
                ret[b], length[b] = 0.0, 0
    assert n == len(finished) and lengths == pytest.approx(sum(n_steps for _, n_steps in finished))
    assert latest == pytest.approx([r for r, _ in finished][-5:], abs=1e-5)


def _learner(tmp_path: Path, **changes) -> VecEnvLearner:
    cfg = override(
        get_recipe("vecenv").default_config(),
        **{
            "run.logger": "none",
            "run.eval_episodes": 2,
            "algo.num_envs": 8,
            "algo.rollout_length": 6,
            "algo.num_minibatches": 1,
            "algo.epochs": 1,
            **changes,
        },
    )
    return VecEnvLearner(RoleContext(cfg, None, 0, {0: "learner"}, tmp_path))


def test_learner_targets_and_update_against_the_slow_loops(tmp_path):
    """The learner's GAE inputs (values of obs and of the true next obs, scaled rewards, both
    flags) and its first PPO step reproduce the slow loops on its own rollout."""
    learner = _learner(
        tmp_path, **{"run.env": "Pendulum-v1", "algo.reward_scale": 0.1, "algo.gamma": 0.9, "algo.rollout_length": 210}
    )  # crosses Pendulum's 200-step truncation
    learner._rollout(learner.env.reset())
    b, a = learner.buf, learner.algo
    assert b.truncated[199].all() and not b.terminated.any()
    batch = learner._targets()
    assert set(keys.PPO_IN_KEYS) <= set(batch.keys()) and batch.batch_size[0] == a.frames_per_rank
    with torch.no_grad():
        v, v_next = learner.model.value(b.obs).squeeze(-1), learner.model.value(b.next_obs).squeeze(-1)
    ref_adv, ref_target = slow_gae(
        0.9, a.gae_lambda, v, v_next, 0.1 * b.reward, b.terminated | b.truncated, b.terminated
    )
    torch.testing.assert_close(batch[keys.VALUE_TARGET].double(), ref_target.reshape(-1), atol=1e-4, rtol=1e-4)
    ref_norm = (ref_adv - ref_adv.mean()) / (ref_adv.std(unbiased=False) + 1e-8)
    torch.testing.assert_close(batch[keys.ADVANTAGE].double(), ref_norm.reshape(-1), atol=1e-4, rtol=1e-4)

    with torch.no_grad():
        log_prob, entropy, _ = learner.model.evaluate(batch[keys.OBSERVATION], batch[keys.ACTION])
    ref_loss = slow_clipped_loss(
        log_prob,
        batch[keys.ACTION_LOG_PROB],
        batch[keys.ADVANTAGE],
        learner.model.value(batch[keys.OBSERVATION]).squeeze(-1).detach(),
        batch[keys.VALUE_TARGET],
        entropy,
        a.clip_eps,
        a.value_coef,
        a.entropy_coef,
    )
    stats = ppo_update(learner.model, learner.optim, batch, a)
    assert stats[0].item() == pytest.approx(ref_loss, rel=1e-4, abs=1e-5)  # one minibatch, one epoch: the loss
    learner.env.close()


def test_gymnax_blines_options_value_clip_and_minibatch_advantages(tmp_path):
    """``algo.clip_value`` and ``algo.minibatch_adv_norm``: the batch keeps raw advantages and the
    rollout's values, and the update's loss (one epoch, one minibatch) is the slow loop's with the
    advantages normalised over the minibatch and ppo2's clipped value loss."""
    learner = _learner(tmp_path, **{"algo.clip_value": True, "algo.minibatch_adv_norm": True})
    learner._rollout(learner.env.reset())
    b, a = learner.buf, learner.algo
    batch = learner._targets()
    with torch.no_grad():
        v, v_next = learner.model.value(b.obs).squeeze(-1), learner.model.value(b.next_obs).squeeze(-1)
    ref_adv, _ = slow_gae(a.gamma, a.gae_lambda, v, v_next, b.reward, b.terminated | b.truncated, b.terminated)
    torch.testing.assert_close(batch[keys.ADVANTAGE].double(), ref_adv.reshape(-1), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(batch[keys.STATE_VALUE], v.reshape(-1), atol=1e-5, rtol=1e-5)

    # a value moved away from the rollout's, so that the clip is live in the loss
    batch[keys.STATE_VALUE] = batch[keys.STATE_VALUE] + torch.linspace(-1, 1, batch.shape[0])
    adv = batch[keys.ADVANTAGE]
    with torch.no_grad():
        log_prob, entropy, value = learner.model.evaluate(batch[keys.OBSERVATION], batch[keys.ACTION])
    args = (log_prob, batch[keys.ACTION_LOG_PROB], (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8), value)
    rest = (batch[keys.VALUE_TARGET], entropy, a.clip_eps, a.value_coef, a.entropy_coef)
    ref_loss = slow_clipped_loss(*args, *rest, old_value=batch[keys.STATE_VALUE])
    assert ref_loss != pytest.approx(slow_clipped_loss(*args, *rest), rel=1e-3)
    stats = ppo_update(learner.model, learner.optim, batch, a)
    assert stats[0].item() == pytest.approx(ref_loss, rel=1e-4, abs=1e-5)
    learner.env.close()


def test_normalize_advantage_single_process():
    x = torch.randn(1000) * 3 + 2
    y = normalize_advantage(x)
    assert abs(y.mean().item()) < 1e-5 and y.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(
    "field,value",
    [("num_envs", 0), ("num_minibatches", 7), ("gamma", 1.5), ("clip_eps", 0.0), ("env_factory", "no_colon")],
)
def test_config_invariants(field, value):
    with pytest.raises(ValueError, match=field.split("_")[0]):
        override(get_recipe("vecenv").default_config(), **{f"algo.{field}": value})


def test_minatar_gymnax_preset_has_gymnax_blines_ppo_settings():
    """The values of gymnax-blines' ``agents/<Game>-MinAtar/ppo.yaml`` (commit 3f029d6; the same for all
    four games with a PPO row) and its ``Categorical-MLP`` (2 x 256, ReLU, separate towers on the
    flattened grid), 10M steps with nothing to stop a run sooner."""
    from distrl.cli.options import experiment_config

    cfg = experiment_config("vecenv", "minatar_gymnax")
    a, net, run = cfg.algo, cfg.net, cfg.run
    gymnax = dict(num_envs=64, rollout_length=128, epochs=4, num_minibatches=8, lr=5e-4, anneal_lr=False)
    gymnax |= dict(gamma=0.999, gae_lambda=0.95, clip_eps=0.2, entropy_coef=0.01, value_coef=0.5, max_grad_norm=0.5)
    assert {k: getattr(a, k) for k in gymnax} == gymnax
    assert (net.encoder, net.hidden, net.activation) == ("mlp", (256, 256), "relu")
    assert run.env == "MinAtar/Breakout-v1" and run.total_frames == 10_000_000 and run.target_return is None
    assert run.max_time_s * 2_000 >= run.total_frames  # the clock stops a run only below 2k steps/s
    model = ActorCritic((4, 10, 10), 3, net)
    assert model.policy[1].in_features == 400 and model.value[1].in_features == 400  # two MLPs on the flat grid


def test_minatar_gymnax_freeway_preset_changes_only_what_its_docstring_says():
    """Freeway's row: gymnax's rules, gymnax-blines' value clip and per-minibatch advantages, and the
    learning rate decayed to 0 at 10M steps; every other setting is ``minatar_gymnax``'s."""
    from dataclasses import asdict

    from distrl.cli.options import experiment_config

    base, freeway = (asdict(experiment_config("vecenv", name)) for name in ("minatar_gymnax", "minatar_gymnax_freeway"))
    parts = [p for p in base if isinstance(base[p], dict)]  # run, algo, net, ...
    assert all(base[p] == freeway[p] for p in base if p not in parts)
    changed = {(p, k): v for p in parts for k, v in freeway[p].items() if base[p][k] != v}
    assert changed == {
        ("run", "env"): "MinAtar/Freeway-v1",
        ("algo", "env_factory"): "distrl.envs.batched:minatar_gymnax_env",
        ("algo", "clip_value"): True,
        ("algo", "minibatch_adv_norm"): True,
        ("algo", "anneal_lr"): True,
    }


@pytest.mark.parametrize("env_id", ["MinAtar/Seaquest-v1", "CartPole-v1"])
def test_compile_wraps_classic_control_dynamics_and_leaves_minatar_eager(tmp_path, env_id):
    """``algo.compile``: a MinAtar game's ``dynamics`` is a method (compiling the class's function
    once lost its ``self``) and stays eager; CartPole's pure step is compiled. Compiling is lazy,
    so building the learner costs nothing; the eager game still steps."""
    learner = _learner(tmp_path, **{"run.env": env_id, "algo.compile": True})
    env = learner.env.env
    assert ("dynamics" in vars(env)) == (env_id == "CartPole-v1")
    if env_id != "CartPole-v1":
        env.reset_all()
        assert env.step_autoreset(torch.zeros(8, dtype=torch.int64))[0].shape == (8, 10, 10, 10)


def test_obs_norm_merges_batches_like_one_big_batch():
    from distrl.nn.obs_norm import ObsNorm

    g = torch.Generator().manual_seed(4)
    batches = [
        torch.randn(n, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1]) + 2 for n in (50, 7, 300)
    ]
    norm = ObsNorm(3)
    for x in batches:
        norm.update(torch.tensor(float(len(x)), dtype=torch.float64), x.sum(0), x.square().sum(0))
    every = torch.cat(batches)
    torch.testing.assert_close(norm.mean.double(), every.mean(0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(norm.var.double(), every.var(0, unbiased=False), atol=1e-4, rtol=1e-4)
    assert norm(every.float()).abs().max() <= 10.0


def test_policy_lag_counts_the_optimizer_steps_since_the_rollout():
    """One definition across recipes: a use of a sample after k optimizer steps since the policy
    that collected it has lag k (impala and seed: an update per batch; here epochs x minibatches)."""
    from distrl.recipes.vecenv.learner import reuse_lag

    lag = reuse_lag(8, epochs=3, num_minibatches=2)
    assert lag.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5]
    assert reuse_lag(10, epochs=1, num_minibatches=1).tolist() == [0] * 10  # one pass, one step: on-policy
    big = reuse_lag(4096, epochs=4, num_minibatches=4)
    assert big.numel() == 4 * 4096 and big.float().mean() == 7.5 and int(big.max()) == 15
