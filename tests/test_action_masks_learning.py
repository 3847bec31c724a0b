"""Action masks learned end to end: ``impala``, ``sf`` and ``apex`` trained briefly on
``distrl/MaskedPick-v0`` (an illegal action costs -1 and ends the episode: distrl/envs/mock.py) beside
the same recipe on ``distrl/MaskedPickBlind-v0``, the same env with the mask hidden (the unmasked
baseline). Each run is loaded back as a TorchRL actor (``load_policy``, which reads ``action_mask``
beside ``observation``) and plays 1,000 steps: the masked policy never takes an illegal action and
its return beats the baseline's.

Greedy returns of the debug presets (20k frames, 12k for apex), masked against blind: impala 10.2 /
0.0, sf 6.4 / 0.0, apex 10.5 / 0.0 (a uniform legal policy scores about 5, the best about 10.6); the
tests train less (12k frames, apex 8k: impala 8.0, sf 6.8, apex 10.3 masked), and at most 20 s a run:
the claims hold for any masked policy (an untrained one scores about 4-5, any blind one about 0), so
a busy machine that cuts a run short weakens no assertion. Measured: 9-14 s a recipe with the load
average near 7, up to 93 s for apex's pair near 11 (before the 20 s cap).
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical

import distrl
from distrl.data import keys
from helpers import read_summary

MASKED, BLIND = "distrl/MaskedPick-v0", "distrl/MaskedPickBlind-v0"
STEPS = 1_000


def play(policy, env_id: str, steps: int = STEPS, seed: int = 0) -> tuple[int, list[float]]:
    """``(illegal actions taken, returns of the episodes finished)`` of ``steps`` steps of the TorchRL
    actor ``policy`` on ``env_id`` as gymnasium makes it: a Dict observation gives the actor its
    ``observation`` and ``action_mask``, the blind env its observation alone."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    illegal, returns, ret = 0, [], 0.0
    with torch.no_grad():
        for _ in range(steps):
            if isinstance(obs, dict):
                td = TensorDict(
                    {
                        keys.OBSERVATION: torch.as_tensor(obs["observation"]),
                        keys.ACTION_MASK: torch.as_tensor(obs["action_mask"]).bool(),
                    }
                )
            else:
                td = TensorDict({keys.OBSERVATION: torch.as_tensor(obs)})
            action = int(policy(td)[keys.ACTION])
            illegal += not env.unwrapped._legal[action]
            obs, reward, term, trunc, _ = env.step(action)
            ret += reward
            if term or trunc:
                returns.append(ret)
                ret = 0.0
                obs, _ = env.reset()
    env.close()
    return illegal, returns


@pytest.mark.timeout(150)
@pytest.mark.parametrize("recipe,frames", [("impala", 12_000), ("sf", 12_000), ("apex", 8_000)])
def test_a_masked_policy_never_acts_illegally_and_beats_the_blind_one(tmp_path, in_process, recipe, frames):
    runs = {env: tmp_path / env.split("/")[1] for env in (MASKED, BLIND)}
    for env, run in runs.items():  # in this process: a run's own start-up would cost more than its training
        argv = [recipe, "--experiment", "debug", "--env", env, "--run-dir", str(run), "--total-frames", str(frames)]
        assert in_process([*argv, "--seed", "1", "--max-time-s", "20"]) == 0  # or sooner, on busy cores
    masked, blind = (read_summary(run) for run in runs.values())
    assert masked["eval_return_mean"] > blind["eval_return_mean"] + 3, (masked, blind)
    indices = Categorical(4)  # actions as indices, as gymnasium takes them
    illegal, masked_returns = play(distrl.load_policy(runs[MASKED], checkpoint="last", action_spec=indices), MASKED)
    assert illegal == 0
    blind_illegal, blind_returns = play(distrl.load_policy(runs[BLIND], checkpoint="last", action_spec=indices), BLIND)
    assert blind_illegal > 100  # the baseline plays illegal moves: the env's mask is what it lacks
    mean = lambda r: sum(r) / len(r)  # noqa: E731
    assert len(masked_returns) >= 40 and mean(masked_returns) > mean(blind_returns) + 3, (masked_returns, blind_returns)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("recipe,frames", [("seed", 10_000), ("a3c", 20_000), ("vecenv", 50_000)])
def test_the_other_discrete_recipes_never_act_illegally(tmp_path, in_process, recipe, frames):
    """The same path serves ``seed`` (its mlp core), ``a3c`` and ``vecenv`` (a gymnasium id's vector env):
    masked runs only (the blind baseline scores about 0 whatever the recipe, as above)."""
    run = tmp_path / "run"
    argv = [recipe, "--experiment", "debug", "--env", MASKED, "--run-dir", str(run), "--total-frames", str(frames)]
    assert in_process([*argv, "--seed", "1", "--max-time-s", "20"]) == 0
    assert read_summary(run)["eval_return_mean"] > 3
    illegal, returns = play(distrl.load_policy(run, checkpoint="last", action_spec=Categorical(4)), MASKED)
    assert illegal == 0 and sum(returns) / len(returns) > 3, returns
