"""An ``--env`` is resolved once: :func:`distrl.envs.gym.env_info` says what it names (kind, spaces, the
backend vecenv steps it in), the plan asks first, and every role of the process gets that description."""

from __future__ import annotations

import pytest

from distrl.cli.options import build_config, make_parser
from distrl.cli.runner import plan
from distrl.envs.gym import env_info
from distrl.envs.info import KINDS


@pytest.mark.parametrize(
    "env,kind,torch_native",
    [
        ("CartPole-v1", "gymnasium", True),
        ("MinAtar/Breakout-v1", "minatar", True),
        ("MinAtar/Asterix-v1", "minatar", True),  # all five MinAtar games are torch-native
        ("distrl/MatchSign-v0", "distrl", False),
        ("distrl.envs.torchrl_factories:match_sign_with_stepcounter", "torchrl", False),
    ],
)
def test_what_an_env_names(env, kind, torch_native):
    info = env_info(env)
    assert info.kind == kind and kind in KINDS and info.torch_native is torch_native
    assert env_info(env) is info  # once per process: every later question is answered from the first


def test_the_kinds_of_the_optional_suites():
    pytest.importorskip("ale_py")
    pytest.importorskip("mujoco")
    pong, cheetah = env_info("ALE/Pong-v5"), env_info("HalfCheetah-v5")
    assert (pong.kind, pong.torch_native, pong.frame_stack, pong.num_actions) == ("ale", False, 4, 6)
    assert (cheetah.kind, cheetah.num_actions, cheetah.action_dim) == ("mujoco", None, 6)


def test_the_plan_hands_its_description_to_every_role():
    cfg = build_config(make_parser().parse_args(["impala", "--experiment", "debug", "--logger", "none"]))
    p = plan(cfg, 1)
    assert p.env is env_info(cfg.run.env) and p.env.kind == "distrl"
