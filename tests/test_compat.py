"""What a user kept from the previous release still works: a policy exported by distrl 0.2.0
(``distrl export-policy``) and that run's directory, both from impala's ``debug`` experiment on the
toy env, committed as they were written (``tests/fixtures/impala-debug-0.2.0``)."""

from __future__ import annotations

import gymnasium as gym
import torch
from tensordict import TensorDict

import distrl
import distrl.envs.mock  # noqa: F401  (registers distrl/MatchSign-v0)
from helpers import ROOT

RUN = ROOT / "tests" / "fixtures" / "impala-debug-0.2.0"


def play(policy, episodes: int = 5) -> list[float]:
    """Returns of ``policy`` (a TensorDict module writing one-hot ``action``) on the toy env."""
    env, out = gym.make("distrl/MatchSign-v0"), []
    for ep in range(episodes):
        obs, _ = env.reset(seed=ep)
        total, done = 0.0, False
        while not done:
            td = policy(TensorDict(observation=torch.as_tensor(obs, dtype=torch.float32)))
            obs, r, term, trunc, _ = env.step(int(td["action"].argmax()))
            total, done = total + r, term or trunc
        out.append(total)
    return out


def test_a_policy_exported_by_the_previous_release_loads_and_plays():
    policy = torch.load(RUN / "policy.pt", weights_only=False)
    assert min(play(policy)) >= 19  # it scored 20 when exported; uniform play scores 10


def test_load_policy_reads_the_previous_releases_run_directory():
    policy = distrl.load_policy(RUN, checkpoint="last")
    assert min(play(policy)) >= 19
