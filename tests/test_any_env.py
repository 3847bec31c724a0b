"""Any env a user has (#47): gymnasium's ``module:EnvId`` beside TorchRL's ``module:function``, and
TorchRL factories with image observations (uint8, channels first or last) and box actions.

The rules (distrl/envs/info.py ``is_factory``): ``module:NAME`` imports ``module``; a callable
``NAME`` there (not a gymnasium ``Env`` class) is a factory, else an id the import registered is a
gymnasium id, else one error line. The envs are tests/user_envs.py's bandits.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import read_summary
from distrl.data import keys
from distrl.envs.gym import env_info, make_vector_env
from distrl.envs.info import gym_id, is_factory
from distrl.envs.torchrl_env import check_factory, evaluate_factory, make_env
from distrl.train import main

GYM_ID = "tests.user_envs:PixelSign-v0"  #: gymnasium's module:EnvId (registered on import)
PIXELS_HWC = "tests.user_envs:pixels_channels_last"  #: GymEnv's ``pixels`` [6, 6, 3]
PIXELS_CHW = "tests.user_envs:pixels_channels_first"  #: ``observation`` [3, 6, 6]
BOX = "tests.user_envs:continuous"  #: a flat observation and a Box(-1, 1, (1,)) action


def test_module_colon_name_is_decided_by_what_the_name_is():
    assert is_factory(PIXELS_HWC) and is_factory(BOX)  # functions
    assert not is_factory(GYM_ID) and gym_id(GYM_ID) == "PixelSign-v0"  # an id the import registered
    assert not is_factory("CartPole-v1") and gym_id("CartPole-v1") == "CartPole-v1"
    info = env_info(GYM_ID)  # the gymnasium path: channels first, uint8, like any gymnasium image
    assert (info.kind, info.shape, info.obs_dtype, info.num_actions) == ("gymnasium", (3, 6, 6), torch.uint8, 2)


@pytest.mark.parametrize(
    "env,message",
    [
        ("tests.user_envs:NOT_AN_ENV", "tests.user_envs.NOT_AN_ENV is of type int, not a function returning a TorchRL"),
        ("tests.user_envs:PixelSign", "is a gymnasium Env class, not an env id; name the id it is registered as: "
         "--env tests.user_envs:PixelSign-v0"),
        ("tests.user_envs:PixelSign-v1", "registers no gymnasium id 'PixelSign-v1'; did you mean "
         "tests.user_envs:PixelSign-v0?"),
        ("tests.no_such_module:PixelSign-v0", "cannot import module 'tests.no_such_module'"),
    ],
)  # fmt: skip
def test_a_name_that_is_neither_is_one_line(env, message, capsys):
    assert main(["sf", "--env", env, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


@pytest.mark.parametrize(
    "recipe,env,message",
    [
        ("apex", "tests.user_envs:continuous_unbounded", "apex's SAC learner squashes its actions into a bounded box; "
         "this env's action spec is UnboundedContinuous"),
        ("vecenv", PIXELS_HWC, "vecenv cannot step a TorchRL env factory"),
        ("sf", "tests.user_envs:two_actions", "distrl trains on one discrete action (Categorical or OneHot) or a flat "
         "continuous action; this env's is MultiCategorical [2]"),
        ("impala", "tests.user_envs:PairOfActions-v0", "distrl trains on a Discrete action space or a flat Box; this "
         "one is MultiDiscrete([3 2])"),
    ],
)  # fmt: skip
def test_what_a_recipe_cannot_take_is_one_line(recipe, env, message, capsys):
    assert main([recipe, "--env", env, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("spec", [PIXELS_HWC, PIXELS_CHW])
def test_factory_images_travel_channels_first_in_their_dtype(spec):
    info = check_factory(spec)
    assert (info.shape, info.obs_dtype, info.num_actions) == ((3, 6, 6), torch.uint8, 2)
    env = make_vector_env(spec, 3, seed=1)  # seed, sf and a3c's path; impala's collector reads make_env's
    try:
        obs = env.reset(seed=1)[0]
        nxt, _, _, _, info = env.step(np.array([0, 1, 0]))
        for o in (obs, nxt, info["final_obs"]):
            assert o.shape == (3, 3, 6, 6) and o.dtype == np.uint8
            assert np.isin(o, (0, 255)).all() and (o == o[:, :1, :1, :1]).all()  # a sign's image, whole
    finally:
        env.close()


def test_box_actions_are_clipped_at_the_env_and_kept_as_sampled():
    info = check_factory(BOX)
    assert (info.num_actions, info.action_dim, info.shape) == (None, 1, (1,))
    env = make_env(BOX, 4, seed=0)
    try:
        td = env.reset()
        td.set(keys.ACTION, 5.0 * td.get(keys.OBSERVATION))  # 5x the sign: clipped to the sign, paid 1
        out, _ = env.step_and_maybe_reset(td)
        assert (out.get(keys.NEXT).get(keys.STEP_REWARD) == 1).all()
        assert (out.get(keys.ACTION).abs() == 5).all()  # what a trajectory keeps: the policy's sample
    finally:
        env.close()
    vec = make_vector_env(BOX, 4, seed=0)
    try:
        obs = vec.reset(seed=0)[0]
        reward = vec.step(-5.0 * obs)[1]  # against the sign, clipped to the far bound: paid 0
        assert reward.dtype == np.float64 and (reward == 0).all()
    finally:
        vec.close()


def test_the_greedy_evaluation_of_a_box_reads_the_head():
    from distrl.nn.heads import GaussianHead

    mean_is_the_sign = lambda obs: torch.cat([3 * obs, torch.zeros_like(obs)], -1)  # cat(mean, log_std)
    assert evaluate_factory(mean_is_the_sign, BOX, 3, 0, torch.device("cpu"), GaussianHead(1)) == [20.0] * 3


def _trains(train, tmp_path, recipe: str, env: str, nproc: int = 1) -> dict:
    """A few seconds of ``recipe`` on ``env``: status 0, a checkpoint, a summary of a run that updated.
    ``train``: the ``jobs`` fixture (under torchrun when ``nproc > 1``) or ``in_process``."""
    run = tmp_path / "run"
    args = [recipe, "--experiment", "debug", "--env", env, "--run-dir", str(run), "--max-time-s", "5"]
    if callable(train):
        assert train(args) == 0
    else:
        proc = train.train(args, nproc=nproc, timeout=90)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["env"] == env and s["episodes"] > 0 and s["learner_updates"] > 0
    assert (run / "checkpoints" / "best.pt").exists() and np.isfinite(s["eval_return_mean"])
    return s


def test_a_gymnasium_id_registered_on_import_trains_under_torchrun(tmp_path, jobs):
    """Every rank imports tests.user_envs and reads ReachSign-v0 as a gymnasium id; the policy loads back
    with the id's Box bounds (``gym.make`` imports the module)."""
    from tensordict import TensorDict

    import distrl

    s = _trains(jobs, tmp_path, "impala", "tests.user_envs:ReachSign-v0", nproc=2)
    assert s["roles"] == {"0": "learner", "1": "actor"}
    policy = distrl.load_policy(tmp_path / "run")
    bounds = policy.spec[keys.ACTION].space
    assert bounds.low.tolist() == [-1.0] and bounds.high.tolist() == [1.0]
    action = policy(TensorDict({keys.OBSERVATION: torch.ones(2, 1)}, batch_size=[2]))[keys.ACTION]
    assert action.shape == (2, 1) and (action.abs() <= 1).all()


def test_load_policy_tells_a_box_factory_from_a_discrete_one():
    """``net.log_std=state`` leaves no parameter to read: the env's actions decide."""
    import dataclasses

    from distrl.config import NetConfig
    from distrl.nn.trained_policy import _gaussian

    net = dataclasses.replace(NetConfig(), log_std="state")
    assert (
        _gaussian({}, net, BOX)
        and not _gaussian({}, net, PIXELS_HWC)
        and _gaussian({}, net, "tests.user_envs:ReachSign-v0")
    )


@pytest.mark.parametrize("recipe", ["impala", "sf"])
def test_a_pixel_factory_trains(recipe, tmp_path, in_process):
    _trains(in_process, tmp_path, recipe, PIXELS_HWC)


@pytest.mark.parametrize("recipe", ["sf", "apex"])  # apex: its SAC learner, squashed into the factory's box
def test_a_box_factory_trains(recipe, tmp_path, in_process):
    _trains(in_process, tmp_path, recipe, BOX)
