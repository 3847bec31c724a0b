"""Door 1: ``--env module:function``, a user's TorchRL env stepped by TorchRL's ``Collector``.

The collector path must hand the learner what the gymnasium path does (same keys, shapes and
dtypes, and the same frames for the same seeds), take new weights through
``update_policy_weights_`` with the version on every frame, refuse what it cannot train on in
one line before any process starts, and learn, in one process and under torchrun.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from helpers import read_summary
from distrl.data import keys
from distrl.envs.gym import is_factory
from distrl.nn.models import ActorCritic
from distrl.roles.env_runner import EnvRunner, make_env_runner
from distrl.train import main

TOY = "distrl.envs.torchrl_factories:match_sign_with_stepcounter"  # fn(): distrl batches it in a SerialEnv
#: fn(num_envs): batched by the factory, 4-5x faster per frame: the learning runs use it
TOY_VECTOR = "distrl.envs.torchrl_factories:match_sign_vector_with_stepcounter"
B, T = 4, 25  # T > the toy's 20-step episodes: every env ends one inside the unroll


def test_a_factory_is_told_from_a_gymnasium_id():
    # by what the name is in the imported module (tests/test_any_env.py has every rule)
    assert is_factory(TOY) and is_factory("tests.user_envs:continuous")
    assert not is_factory("CartPole-v1") and not is_factory("tests.user_envs:PixelSign-v0") and not is_factory(":f")


def _match_sign(obs: torch.Tensor) -> dict:
    """The toy's best policy, deterministic, with a log-prob to carry: ``obs [B, 1] -> action [B]``."""
    action = (obs[:, 0] > 0).long()
    return {keys.ACTION: action, keys.ACTION_LOG_PROB: torch.zeros(obs.shape[0])}


def test_the_collector_path_gives_the_gymnasium_paths_trajectory():
    fast = EnvRunner("distrl/MatchSign-v0", B, 7, rank=1)
    slow = make_env_runner(TOY, B, 7, 1, ActorCritic(1, 2), _match_sign, T)
    try:
        (a, ret_a, len_a), (b, ret_b, len_b) = fast.unroll(_match_sign, T), slow.unroll(_match_sign, T)
    finally:
        fast.close()
        slow.close()
    a[keys.POLICY_VERSION] = torch.full((B, T), -1)  # the impala actor's stamp on the fast path
    assert a.batch_size == b.batch_size == (B, T)
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    assert set(keys.IMPALA_IN_KEYS) <= set(b.keys(True, True))
    for k in a.keys(True, True):
        assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, k
    # The seeds differ (TorchRL's SerialEnv chains its envs' seeds), the layout must not: the best
    # policy earns 1 a step, every episode is truncated after 20 steps, and ("next", "observation")
    # is the true next observation: the next step's own, except where an episode ended.
    assert (b[keys.REWARD] == 1).all() and not b[keys.TERMINATED].any()
    assert torch.equal(a[keys.TRUNCATED], b[keys.TRUNCATED]) and torch.equal(b[keys.DONE], b[keys.TRUNCATED])
    for traj in (a, b):
        going = ~traj[keys.DONE][:, :-1, 0]
        assert torch.equal(traj[keys.NEXT_OBSERVATION][:, :-1][going], traj[keys.OBSERVATION][:, 1:][going])
    assert ret_a == ret_b == [20.0] * B and len_a == len_b == [20] * B


def test_new_weights_go_through_update_policy_weights_and_stamp_every_frame(monkeypatch):
    from torchrl.collectors import Collector

    model = ActorCritic(1, 2)
    runner = make_env_runner(TOY, B, 0, 1, model, _match_sign, T)
    calls = []
    original = Collector.update_policy_weights_
    monkeypatch.setattr(
        Collector, "update_policy_weights_", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    try:
        assert (runner.unroll(_match_sign, T)[0][keys.POLICY_VERSION] == -1).all()
        new = ActorCritic(1, 2)
        runner.load_weights(model, TensorDict(new.state_dict()), 5)
        assert calls and all(torch.equal(p, q) for p, q in zip(model.parameters(), new.parameters()))
        assert (runner.unroll(_match_sign, T)[0][keys.POLICY_VERSION] == 5).all()
    finally:
        runner.close()


@pytest.mark.parametrize(
    "env,message",
    [
        ("tests.door1_factories:raises", "the factory raised RuntimeError: this factory always fails"),
        ("tests.door1_factories:nope", "module 'tests.door1_factories' has no 'nope'"),
        ("no_such_module:make", "cannot import module 'no_such_module'"),
        ("tests.door1_factories:not_an_env", "not a TorchRL EnvBase"),
        ("tests.door1_factories:image_like", "distrl trains on a flat float observation [F] or an image"),
    ],
)
def test_a_factory_distrl_cannot_use_is_one_line(env, message, capsys):
    assert main(["impala", "--env", env, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def test_a_recipe_that_cannot_step_a_factory_says_so(capsys):
    assert main(["vecenv", "--env", TOY, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "vecenv cannot step a TorchRL env factory" in err and "algo.env_factory" in err, err


def test_the_policy_free_roles_vector_env_steps_the_factory_like_gymnasium():
    """seed, sf and a3c step a factory's env through gymnasium's vector-env calls
    (distrl/envs/torchrl_vector.py): same shapes, dtypes and ``SAME_STEP`` autoreset semantics."""
    from distrl.envs.gym import make_vector_env

    fast, slow = make_vector_env("distrl/MatchSign-v0", B, 3), make_vector_env(TOY, B, 3)
    try:
        obs_a, obs_b = fast.reset(seed=3)[0], slow.reset(seed=3)[0]
        assert obs_a.shape == obs_b.shape == (B, 1) and obs_a.dtype == obs_b.dtype
        ends = 0
        for t in range(T):
            action = (obs_b[:, 0] > 0).astype("int64")  # the best policy: reward 1 every step
            a, b = fast.step((obs_a[:, 0] > 0).astype("int64")), slow.step(action)
            for x, y in zip(a[:4], b[:4]):
                assert x.shape == y.shape and x.dtype == y.dtype
            nxt, reward, term, trunc, info = b
            assert (reward == 1).all() and not term.any()
            assert (trunc == (t == 19)).all() and (a[3] == trunc).all()  # every episode is 20 steps
            going = ~(term | trunc)
            # where no episode ended, the next observation is the final one; where one did, the
            # returned observation is the fresh episode's and final_obs the old one's last
            assert (info["final_obs"][going] == nxt[going]).all()
            ends += int(trunc.sum())
            obs_a, obs_b = a[0], nxt
        assert ends == B  # one truncation per env in 25 steps
    finally:
        fast.close()
        slow.close()


@pytest.mark.parametrize("recipe", ["seed", "sf", "a3c"])
def test_the_policy_free_recipes_learn_the_toy_env_from_a_factory(recipe, tmp_path, in_process):
    run = tmp_path / "run"  # in this process: the factory door is tested, not a process's start
    assert in_process([recipe, "--experiment", "debug", "--env", TOY_VECTOR, "--run-dir", str(run)]) == 0
    s = read_summary(run)
    assert s["env"] == TOY_VECTOR and s["episodes"] > 0 and s["learner_updates"] > 0
    assert s["eval_return_mean"] >= 19.0  # greedy, on the factory's env: uniform scores 10


def test_the_error_is_one_line_on_real_stderr_and_nothing_starts(tmp_path, jobs):
    proc = jobs.train(
        ["impala", "--env", "tests.door1_factories:raises", "--run-dir", str(tmp_path / "run")], timeout=60
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "run").exists()


def test_world_size_one_learns_the_toy_env_through_the_collector(tmp_path, in_process):
    run = tmp_path / "run"
    assert in_process(["impala", "--experiment", "debug", "--env", TOY_VECTOR, "--run-dir", str(run)]) == 0
    s = read_summary(run)
    assert s["env"] == TOY_VECTOR and s["stop_reason"] == "total_frames" and s["episodes"] > 0
    assert s["eval_return_mean"] >= 19.0  # the greedy eval ran on the factory's env: uniform scores 10
    assert s["learner_updates"] > 0 and s["counters"].get("rejected_trajectories", 0) == 0


def test_torchrun_two_processes_through_the_collector(tmp_path, jobs):
    run = tmp_path / "run"
    proc = jobs.train(
        ["impala", "--experiment", "debug", "--env", TOY_VECTOR, "--run-dir", str(run)], nproc=2, timeout=180
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["roles"] == {"0": "learner", "1": "actor"}
    assert s["eval_return_mean"] >= 19.0 and s["policy_lag_max"] >= 0


def test_apex_actor_cuts_transitions_from_the_collector_path(tmp_path):
    """apex's actors share ``make_env_runner``: its n-step transitions come out of a factory env
    with the keys its learner reads (a full apex run on TOY_VECTOR learns too: about 40 s)."""
    from distrl.recipes import get_recipe
    from distrl.runtime.context import RoleContext
    from distrl.config import override
    from distrl.recipes.apex.actor import ApexActor
    from distrl.transport.local import LocalHub

    cfg = override(get_recipe("apex").default_config(), **{"run.env": TOY, "algo.envs_per_actor": 3})
    actor = ApexActor(RoleContext(cfg, LocalHub(3).endpoint(2), 2, {0: "learner", 1: "replay", 2: "actor"}, tmp_path))
    try:
        traj, returns, _ = actor.runner.unroll(actor._act, cfg.algo.unroll_length)
        out, priority = actor.transitions(traj)
    finally:
        actor.runner.close()
    assert set(keys.APEX_IN_KEYS) <= set(out.keys(True, True)) and priority.shape == out.batch_size
