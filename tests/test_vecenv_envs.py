"""The vecenv env adapters: the lean native path, the generic TorchRL path, user factories."""

from __future__ import annotations

import json

import pytest
import torch

from distrl.recipes import get_recipe
from distrl.runtime.context import RoleContext
from distrl.config import override
from distrl.envs.batched import (
    GymVectorEnv,
    NativeEnv,
    TorchRLEnv,
    evaluate_greedy,
    gym_serial_env,
    load_factory,
    make_batched_env,
)
from distrl.recipes.vecenv.learner import VecEnvLearner
from distrl.cli.runner import plan

CPU = torch.device("cpu")


@pytest.mark.parametrize("env_id,steps", [("CartPole-v1", 120), ("Pendulum-v1", 230)])
def test_generic_torchrl_path_steps_exactly_like_the_native_one(env_id, steps):
    """The same torch env, once through ``step_autoreset`` and once only through TorchRL's
    ``EnvBase`` API (``step_and_maybe_reset`` behind a transform), gives the same episodes."""
    native = make_batched_env(env_id, 6, CPU, seed=3)
    generic = make_batched_env(env_id, 6, CPU, seed=3, factory="distrl.envs.batched:torchrl_native_env")
    assert isinstance(native, NativeEnv) and isinstance(generic, TorchRLEnv)
    assert (native.obs_shape, native.num_actions, native.action_dim) == (
        generic.obs_shape,
        generic.num_actions,
        generic.action_dim,
    )
    torch.testing.assert_close(native.reset(), generic.reset())
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        if native.num_actions:
            action = torch.randint(0, native.num_actions, (6,), generator=g)
        else:
            action = 3 * torch.randn(6, native.action_dim, generator=g)  # beyond the bounds: both clip
        for a, b in zip(native.step(action), generic.step(action)):
            torch.testing.assert_close(a, b)
    generic.close()


def first_episode_returns(env, greedy, steps: int = 500) -> list[float]:
    """Return of each env's first episode under ``greedy``, stepped by TorchRL's own ``rollout``
    (not by distrl's adapter): the reference for the learner's evaluation."""

    def policy(td):
        index = greedy(td.get("observation").float())
        return td.set("action", torch.nn.functional.one_hot(index, 2))

    with torch.no_grad():
        td = env.rollout(steps, policy=policy, break_when_any_done=False)
    reward, done = td.get(("next", "reward"))[..., 0], td.get(("next", "done"))[..., 0]
    before_first_end = (done.long().cumsum(-1) - done.long()) == 0  # steps up to and with the first end
    return (reward * before_first_end).sum(-1).tolist()


def test_serial_gym_env_trains_through_the_whole_loop(tmp_path, training):
    """Gymnasium CartPole in TorchRL's SerialEnv (one-hot actions, CPU envs): two updates that move
    the parameters, then the greedy evaluation of the trained policy through the same factory, and
    a summary. Two updates teach CartPole nothing, so no return bar can tell a working loop from a
    broken one (random play scores ~22, the untrained greedy policy ~9): the updates are checked
    on the parameters, the evaluation against TorchRL's own rollout of the final policy."""
    cfg = override(
        get_recipe("vecenv").default_config(),
        **{
            "run.logger": "none",
            "run.eval_episodes": 2,
            "run.total_frames": 2 * 4 * 8,
            "run.target_return": None,
            "algo.env_factory": "distrl.envs.batched:gym_serial_env",
            "algo.num_envs": 4,
            "algo.rollout_length": 8,
            "algo.num_minibatches": 2,
            "algo.epochs": 1,
        },
    )
    learner = VecEnvLearner(RoleContext(cfg, None, 0, {0: "learner"}, tmp_path))
    assert isinstance(learner.env, TorchRLEnv) and learner.env.one_hot
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    summary = learner.run()
    assert summary["env_frames"] == 64 and summary["stop_reason"] == "total_frames"
    # 2 updates x 1 epoch x 2 minibatches: 4 Adam steps, and every weight matrix moved
    steps = learner.optim.state_dict()["state"].get(0, {}).get("step")
    assert steps == 4, f"Adam took {steps} steps, not 4"
    moved = {k for k, v in learner.model.state_dict().items() if not torch.equal(v, before[k])}
    assert {k for k in before if k.endswith("weight")} <= moved, sorted(set(before) - moved)
    # the evaluation is the final policy's greedy play on fresh envs of the same factory (seed + 10000)
    env = gym_serial_env("CartPole-v1", 2, CPU, cfg.run.seed + 10_000)
    try:
        want = first_episode_returns(env, learner.model.greedy)
    finally:
        env.close()
    assert summary["eval_episodes"] == 2 and summary["eval_return_mean"] == sum(want) / 2, (summary, want)
    # 1 epoch of 2 minibatches: the second minibatch is used one optimizer step after the rollout
    assert json.loads((tmp_path / "summary.json").read_text())["policy_lag_max"] == 1


def test_evaluate_greedy_counts_only_the_first_episode():
    env = make_batched_env("CartPole-v1", 5, CPU, seed=0)
    returns = evaluate_greedy(env, lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64))  # always push left
    assert len(returns) == 5 and all(5 <= r <= 20 for r in returns)
    pendulum = evaluate_greedy(
        make_batched_env("Pendulum-v1", 3, CPU, seed=0), lambda obs: torch.zeros(obs.shape[0], 1)
    )
    assert len(pendulum) == 3 and all(-16.3 * 200 <= r < 0 for r in pendulum)  # 200 steps of cost, then truncated


def test_the_gymnax_rules_factory_is_a_torch_minatar_game_on_the_lean_path():
    """``algo.env_factory=distrl.envs.batched:minatar_gymnax_env``: no sticky actions, episodes cut at
    1,000 steps (Freeway's clock its own), stepped through ``step_autoreset`` as the built-in games."""
    factory = "distrl.envs.batched:minatar_gymnax_env"
    env = make_batched_env("MinAtar/Asterix-v1", 4, CPU, seed=0, factory=factory)
    assert isinstance(env, NativeEnv) and env.env.sticky_action_prob == 0.0 and env.max_episode_steps == 1_000
    freeway = make_batched_env("MinAtar/Freeway-v1", 4, CPU, seed=0, factory=factory)
    assert freeway.env.sticky_action_prob == 0.0 and freeway.max_episode_steps is None
    assert make_batched_env("MinAtar/Asterix-v1", 4, CPU, seed=0).env.sticky_action_prob == 0.1  # the package's


def test_bad_env_choices_fail_before_anything_starts():
    cfg = get_recipe("vecenv").default_config()
    with pytest.raises(ValueError, match="unknown env id 'HalfCheetah-v9'"):
        plan(override(cfg, **{"run.env": "HalfCheetah-v9"}), 1)
    with pytest.raises(ValueError, match="cannot be loaded"):
        plan(override(cfg, **{"algo.env_factory": "distrl.envs.batched:nope"}), 1)
    with pytest.raises(ValueError, match="module:function"):
        load_factory("distrl.envs.batched")
    # a factory's env id need not be a gymnasium id: the factory names its own envs
    p = plan(
        override(
            cfg,
            **{
                "run.env": "MyIsaacTask-v0",
                "algo.env_factory": "distrl.envs.batched:torchrl_native_env",
                "run.run_dir": "unused",
            },
        ),
        2,
    )
    assert p.roles == {0: "learner", 1: "learner"}


def test_an_id_with_no_torch_version_falls_back_to_gymnasiums_vector_env():
    """MuJoCo's ids (and any other gymnasium id) step in gymnasium's vector env on the CPU; its
    Box actions are clipped at the env; episodes cut by the time limit arrive truncated, which the
    rollout counts as finished episodes (tests/test_vecenv_ppo.py: EpisodeStats)."""
    env = make_batched_env("InvertedPendulum-v5", 3, CPU, seed=0)
    try:
        assert isinstance(env, GymVectorEnv) and env.num_actions is None and env.action_dim == 1
        obs = env.reset()
        assert obs.shape == (3, 4) and obs.dtype == torch.float32
        next_obs, reward, term, trunc, obs = env.step(torch.full((3, 1), 100.0))  # far outside [-3, 3]: clipped
        assert reward.shape == term.shape == trunc.shape == (3,) and torch.isfinite(next_obs).all()
    finally:
        env.close()
    pendulum = make_batched_env("Pendulum-v1", 2, CPU, seed=0, factory="distrl.envs.batched:gym_vector_env")
    try:
        pendulum.reset()
        ends = [pendulum.step(torch.zeros(2, 1))[3] for _ in range(200)]  # Pendulum's limit: 200 steps
        assert not any(t.any() for t in ends[:-1]) and ends[-1].all()
    finally:
        pendulum.close()
