"""Door 2 of docs/torchrl.md: a run's policy taken back as a TorchRL actor (``distrl.load_policy``).

Checkpoints of every supported recipe are written here with random weights (no training), and
the TorchRL rollout of the loaded actor must give, episode for episode, the greedy returns of
distrl's own evaluation of the same network. Runs on a TorchRL env factory get their checkpoint
from a learner's own ``LearnerSession`` (what records the env's action encoding at training time),
still without training: the loaded actor must write actions as that env takes them, one-hot or
indices. One real run (impala ``debug``, one process) checks the whole path against its
``summary.json``.
"""

from __future__ import annotations

import pytest
import torch
from torchrl.collectors import Collector
from torchrl.data import Categorical, OneHot
from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv

import distrl
from conftest import read_summary
from distrl.runtime.context import RoleContext
from distrl.runtime.checkpoint import save_checkpoint
from distrl.cli.options import experiment_config
from distrl.config import override
from distrl.envs.gym import evaluate
from distrl.nn.models import ActorCritic, QNetwork
from distrl.roles.session import LearnerSession
from distrl.recipes.vecenv.learner import VecEnvLearner
from distrl.train import console

EVAL_SEED = 10_000  # every learner evaluates from run.seed + 10_000 (run.seed is 0 here)


def fake_run(tmp_path, recipe: str, model: torch.nn.Module, **changes):
    """A run directory as a learner leaves it: ``config.json`` and a checkpoint of ``model``."""
    cfg = override(experiment_config(recipe, "debug"), **{"run.env": "CartPole-v1", **changes})
    run = tmp_path / recipe
    run.mkdir()
    (run / "config.json").write_text(cfg.to_json())
    save_checkpoint(run, 1, {"model": model.state_dict(), "config": cfg.to_dict()})
    return run


def sharpen(linear: torch.nn.Linear) -> None:
    """A decisive random policy (the init's small last layer makes near-ties everywhere)."""
    with torch.no_grad():
        linear.weight.mul_(300)


def torchrl_returns(policy, env_id: str, episodes: int, seed: int = EVAL_SEED, env=None) -> list[float]:
    """Returns of ``episodes`` TorchRL rollouts, episode ``i`` reset with ``seed + i`` (as distrl's
    evaluation seeds its vector env)."""
    env = env or GymEnv(env_id)
    out = []
    for i in range(episodes):
        td = env.rollout(10_000, policy, auto_reset=False, tensordict=env.reset(seed=seed + i))
        out.append(td["next", "reward"].sum().item())
    env.close()
    return out


def actor_critic(recipe: str):
    torch.manual_seed(1)
    model = ActorCritic(4, 2)
    sharpen(model.policy[-1])
    return model


def q_network():
    torch.manual_seed(4)
    cfg = experiment_config("apex", "debug")
    model = QNetwork(4, 2, cfg.net, cfg.algo.dueling)
    sharpen(model.q[-1].advantage)
    return model


# ---- runs on a TorchRL env factory (``--env module:function``), named by this module's path ----


def cartpole_categorical():
    """The issue's env: index actions (``Categorical``) behind a transform."""
    return TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), StepCounter())


def cartpole_one_hot():
    """GymEnv's default encoding (``OneHot``) behind a transform."""
    return TransformedEnv(GymEnv("CartPole-v1"), StepCounter())


def serial_cartpole_categorical(env_id, num_envs, device, seed):
    """A vecenv ``algo.env_factory`` (``fn(env_id, num_envs, device, seed)``) with index actions."""
    env = SerialEnv(num_envs, lambda: GymEnv(env_id, categorical_action_encoding=True))
    env.set_seed(seed)
    return env


FACTORIES = {"cartpole_categorical": cartpole_categorical, "cartpole_one_hot": cartpole_one_hot}


def learner_run(tmp_path, recipe: str, model: torch.nn.Module, factory: str):
    """A run on ``factory`` whose checkpoint the learner's session wrote, as in training."""
    cfg = override(experiment_config(recipe, "debug"), **{"run.env": f"{__name__}:{factory}", "run.logger": "none"})
    run = tmp_path / recipe
    run.mkdir()
    (run / "config.json").write_text(cfg.to_json())
    session = LearnerSession(RoleContext(cfg, None, 0, {0: "learner"}, run))
    session.checkpoint(model, torch.optim.Adam(model.parameters()))
    session.tracker.writer.close()
    return run


def greedy_returns(model: torch.nn.Module, episodes: int) -> list[float]:
    net = model if isinstance(model, QNetwork) else model.policy
    return evaluate(lambda o: net(o), "CartPole-v1", episodes, EVAL_SEED, torch.device("cpu"))


@pytest.mark.parametrize("recipe", ["impala", "seed", "a3c"])
def test_actor_critic_recipes_roll_out_as_distrl_evaluates(tmp_path, recipe):
    model = actor_critic(recipe)
    policy = distrl.load_policy(fake_run(tmp_path, recipe, model))
    expected = evaluate(lambda o: model.policy(o), "CartPole-v1", 4, EVAL_SEED, torch.device("cpu"))
    assert len(set(expected)) > 1, "a policy this varied tests the seeding too"
    assert torchrl_returns(policy, "CartPole-v1", 4) == expected


def test_index_actions_through_a_categorical_spec(tmp_path):
    model = actor_critic("impala")
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    run = fake_run(tmp_path, "impala", model)
    policy = distrl.load_policy(run, action_spec=env.action_spec)
    assert isinstance(policy.spec["action"], Categorical)
    expected = evaluate(lambda o: model.policy(o), "CartPole-v1", 3, EVAL_SEED, torch.device("cpu"))
    assert torchrl_returns(policy, "CartPole-v1", 3, env=env) == expected
    assert console(["export-policy", str(run), str(tmp_path / "p.pt"), "--categorical-actions"]) == 0
    exported = torch.load(tmp_path / "p.pt", weights_only=False)
    assert isinstance(exported.spec["action"], Categorical)
    assert (
        torchrl_returns(exported, "CartPole-v1", 3, env=GymEnv("CartPole-v1", categorical_action_encoding=True))
        == expected
    )


@pytest.mark.parametrize(
    "recipe, factory, spec",
    [
        ("impala", "cartpole_categorical", Categorical),
        ("impala", "cartpole_one_hot", OneHot),
        ("seed", "cartpole_categorical", Categorical),
        ("sf", "cartpole_categorical", Categorical),
        ("a3c", "cartpole_categorical", Categorical),
        ("apex", "cartpole_categorical", Categorical),
        ("apex", "cartpole_one_hot", OneHot),
    ],
)
def test_the_policy_writes_actions_as_the_training_env_took_them(tmp_path, recipe, factory, spec):
    model = q_network() if recipe == "apex" else actor_critic(recipe)
    policy = distrl.load_policy(learner_run(tmp_path, recipe, model, factory))
    assert torchrl_returns(policy, "CartPole-v1", 3, env=FACTORIES[factory]()) == greedy_returns(model, 3)
    assert isinstance(policy.spec["action"], spec)


def test_export_policy_follows_the_recorded_encoding_and_a_flag_overrides_it(tmp_path, capsys):
    model = actor_critic("impala")
    run, expected = learner_run(tmp_path, "impala", model, "cartpole_categorical"), greedy_returns(model, 3)
    assert console(["export-policy", str(run), str(tmp_path / "p.pt")]) == 0
    exported = torch.load(tmp_path / "p.pt", weights_only=False)
    assert torchrl_returns(exported, "CartPole-v1", 3, env=cartpole_categorical()) == expected
    assert console(["export-policy", str(run), str(tmp_path / "oh.pt"), "--one-hot-actions"]) == 0
    one_hot = torch.load(tmp_path / "oh.pt", weights_only=False)
    assert isinstance(one_hot.spec["action"], OneHot)
    assert torchrl_returns(one_hot, "CartPole-v1", 3, env=cartpole_one_hot()) == expected
    both = ["export-policy", str(run), str(tmp_path / "x.pt"), "--one-hot-actions", "--categorical-actions"]
    with pytest.raises(SystemExit) as status:
        console(both)
    assert status.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_a_checkpoint_without_the_encoding_loads_one_hot_as_before(tmp_path):
    run = fake_run(tmp_path, "impala", actor_critic("impala"), **{"run.env": f"{__name__}:cartpole_categorical"})
    assert isinstance(distrl.load_policy(run).spec["action"], OneHot)  # what distrl gave before recording it
    state = torch.load(next((run / "checkpoints").glob("ckpt_*.pt")), weights_only=False)
    save_checkpoint(run, 2, state | {"action_encoding": "ordinal"})
    with pytest.raises(ValueError, match="action_encoding 'ordinal'"):
        distrl.load_policy(run)


def test_vecenv_records_its_torchrl_env_encoding(tmp_path):
    cfg = override(
        experiment_config("vecenv", "debug"),
        **{"run.env": "CartPole-v1", "algo.env_factory": f"{__name__}:serial_cartpole_categorical", "algo.num_envs": 2},
    )
    (tmp_path / "config.json").write_text(cfg.to_json())
    learner = VecEnvLearner(RoleContext(cfg, None, 0, {0: "learner"}, tmp_path))
    try:
        sharpen([m for m in learner.model.policy.modules() if isinstance(m, torch.nn.Linear)][-1])
        learner.session.checkpoint(learner.model, learner.optim)
    finally:
        learner.session.tracker.writer.close()
        learner.env.close()
    policy = distrl.load_policy(tmp_path)
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    assert torchrl_returns(policy, "CartPole-v1", 3, env=env) == greedy_returns(learner.model, 3)
    assert isinstance(policy.spec["action"], Categorical)


def test_vecenv_policy_includes_its_observation_normalisation(tmp_path):
    torch.manual_seed(2)
    model = ActorCritic(4, 2, override(experiment_config("vecenv", "debug"), **{"net.obs_norm": "on"}).net)
    sharpen(model.policy[1][-1])
    with torch.no_grad():  # statistics far from the identity, so a policy without them plays differently
        model.obs_norm.mean.copy_(torch.tensor([0.5, -1.0, 0.05, 0.3]))
        model.obs_norm.var.copy_(torch.tensor([0.01, 4.0, 0.001, 0.5]))
    policy = distrl.load_policy(fake_run(tmp_path, "vecenv", model, **{"net.obs_norm": "on"}))
    expected = evaluate(lambda o: model.policy(o), "CartPole-v1", 3, EVAL_SEED, torch.device("cpu"))
    assert torchrl_returns(policy, "CartPole-v1", 3) == expected


def vecenv_gaussian(init_log_std: float = -0.5) -> ActorCritic:
    """vecenv's Pendulum network (ObsNorm, then the mean MLP and its log-std) with means outside [-2, 2]."""
    torch.manual_seed(3)
    cfg = override(experiment_config("vecenv", "pendulum"), **{"net.init_log_std": init_log_std})
    model = ActorCritic(3, None, cfg.net, action_dim=1)
    assert model.obs_norm is not None  # auto: flat observations, continuous actions
    with torch.no_grad():
        model.policy[1][0][-1].weight.normal_(0.0, 1.0)  # means outside [-2, 2] in some states
    return model


def test_vecenv_gaussian_policy_is_greedy_and_clipped_to_the_bounds(tmp_path):
    model = vecenv_gaussian()
    run = fake_run(tmp_path, "vecenv", model, **{"run.env": "Pendulum-v1"})
    env = GymEnv("Pendulum-v1")
    td = env.rollout(30, distrl.load_policy(run), auto_reset=False, tensordict=env.reset(seed=5))
    want = model.greedy(td["observation"]).clamp(-2.0, 2.0)
    torch.testing.assert_close(td["action"], want)
    assert (td["action"].abs() == 2.0).any() and (td["action"].abs() < 2.0).any()
    sampled = env.rollout(30, distrl.load_policy(run, sample=True), auto_reset=False, tensordict=env.reset(seed=5))
    assert (sampled["action"].abs() <= 2.0).all() and not torch.equal(sampled["action"], td["action"])
    torch.testing.assert_close(sampled["scale"], torch.full_like(sampled["scale"], -0.5).exp())  # the learned log-std


def test_a_vecenv_checkpoint_from_before_actor_critic_loads_as_it_played(tmp_path):
    """vecenv's own Gaussian actor-critic (0.2.0 until vecenv built ``ActorCritic``) kept its log-std
    vector at the top and the mean MLP as the policy: ``log_std``, ``policy.0`` (ObsNorm),
    ``policy.1.{0,2,4}``. Its checkpoints load (distrl/nn/models.py renames them) and play the same
    greedy actions with the same scale, and ``--resume`` gets every tensor back."""
    model = vecenv_gaussian(init_log_std=-0.7)
    old = {}
    for k, v in model.state_dict().items():
        if k == "policy.1.1.log_std":
            old["log_std"] = v
        elif k.startswith("policy.1.0."):
            old["policy.1." + k[len("policy.1.0.") :]] = v
        else:
            old[k] = v
    cfg = override(experiment_config("vecenv", "pendulum"), **{"run.env": "Pendulum-v1"})
    (tmp_path / "config.json").write_text(cfg.to_json())
    save_checkpoint(tmp_path, 1, {"model": old, "config": cfg.to_dict()})
    env = GymEnv("Pendulum-v1")
    td = env.rollout(30, distrl.load_policy(tmp_path), auto_reset=False, tensordict=env.reset(seed=5))
    torch.testing.assert_close(td["action"], model.greedy(td["observation"]).clamp(-2.0, 2.0))
    torch.testing.assert_close(td["scale"], torch.full_like(td["scale"], -0.7).exp())
    resumed = ActorCritic(3, None, cfg.net, action_dim=1)
    resumed.load_state_dict(old)  # the learner's --resume loads the same way
    for k, v in model.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k


@pytest.mark.parametrize("recipe,log_std", [("sf", "param"), ("impala", "state")])
def test_an_actor_critic_gaussian_loads_with_its_normalisation_and_bounds(tmp_path, recipe, log_std):
    """impala/seed/sf/a3c's Gaussian (distrl/nn/heads.py) with its ObsNorm statistics, as a TorchRL actor:
    greedy actions are the mean clipped to Pendulum's [-2, 2], after the checkpoint's normalisation."""
    torch.manual_seed(4)
    net = override(experiment_config(recipe, "debug"), **{"net.log_std": log_std, "net.init_log_std": -0.5}).net
    model = ActorCritic(3, None, net, action_dim=1)
    assert model.obs_norm is not None  # auto: flat observations, continuous actions
    with torch.no_grad():
        model.obs_norm.update_batch(torch.randn(500, 3) * torch.tensor([1.0, 1.0, 8.0]) + 0.5)
        for p in model.policy.parameters():
            if p.requires_grad and p.dim() == 2:
                p.normal_(0.0, 1.0)  # means outside [-2, 2] in some states
    run = fake_run(
        tmp_path, recipe, model, **{"run.env": "Pendulum-v1", "net.log_std": log_std, "net.init_log_std": -0.5}
    )
    env = GymEnv("Pendulum-v1")
    td = env.rollout(30, distrl.load_policy(run), auto_reset=False, tensordict=env.reset(seed=5))
    torch.testing.assert_close(td["action"], model.greedy(td["observation"]).clamp(-2.0, 2.0))
    assert (td["action"].abs() == 2.0).any() and (td["action"].abs() < 2.0).any()
    _, log_std_out = model.head.split(model.policy(td["observation"]).detach())
    torch.testing.assert_close(td["scale"], log_std_out.exp())


def test_apex_gives_a_greedy_qvalue_actor(tmp_path):
    model = q_network()
    run = fake_run(tmp_path, "apex", model)
    expected = evaluate(lambda o: model(o), "CartPole-v1", 3, EVAL_SEED, torch.device("cpu"))
    assert torchrl_returns(distrl.load_policy(run), "CartPole-v1", 3) == expected
    with pytest.raises(ValueError, match="greedy only"):
        distrl.load_policy(run, sample=True)


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    for bad in (tmp_path / "nowhere", tmp_path):
        with pytest.raises(ValueError, match="not a distrl run directory") as err:
            distrl.load_policy(bad)
        assert "\n" not in str(err.value)
    (tmp_path / "config.json").write_text(experiment_config("impala", "debug").to_json())
    with pytest.raises(ValueError, match="no loadable checkpoint"):
        distrl.load_policy(tmp_path)
    lstm = fake_run(tmp_path, "seed", actor_critic("seed"), **{"algo.core": "lstm"})
    with pytest.raises(ValueError, match="mlp core only"):
        distrl.load_policy(lstm)
    assert console(["export-policy", str(tmp_path / "nowhere"), str(tmp_path / "p.pt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err


def test_a_trained_run_rolls_out_to_its_summary_eval(impala_debug_run, tmp_path, capsys):
    impala_run = impala_debug_run
    summary = read_summary(impala_run)
    episodes = summary["eval_episodes"]
    last = torchrl_returns(distrl.load_policy(impala_run, checkpoint="last"), "distrl/MatchSign-v0", episodes)
    assert sum(last) / episodes == pytest.approx(summary["eval_return_mean"], abs=1e-3)
    best_state = torch.load(impala_run / "checkpoints" / "best.pt", weights_only=False)
    best = torchrl_returns(distrl.load_policy(impala_run), "distrl/MatchSign-v0", episodes)
    assert best == best_state["eval_returns"]
    # the exported file is the same actor, and it runs in a TorchRL collector
    out = tmp_path / "policy.pt"
    assert console(["export-policy", str(impala_run), str(out), "--checkpoint", "last"]) == 0, capsys.readouterr().err
    policy = torch.load(out, weights_only=False)
    assert torchrl_returns(policy, "distrl/MatchSign-v0", episodes) == last
    collector = Collector(GymEnv("distrl/MatchSign-v0"), policy, frames_per_batch=40, total_frames=80)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2 and batches[0]["action"].shape == (40, 2)
