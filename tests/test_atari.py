"""Atari through ale-py (distrl/envs/atari.py): the C++ vector env that trains and the gymnasium
path that evaluates see the same frames; evaluation plays full games; presets and counting."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ale_py")
pytest.importorskip("cv2")

from distrl.cli.options import default_experiment  # noqa: E402
from distrl.config import AtariConfig  # noqa: E402
from distrl.envs import atari  # noqa: E402
from distrl.envs.gym import env_info, make_env, make_vector_env  # noqa: E402

#: no-ops and sticky actions draw from each path's own random stream; without them both are exact
EXACT = AtariConfig(sticky_actions=0.0, noop_max=0, reward_clipping=False)


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ALE/Breakout-v5"])
def test_the_vector_env_and_the_evaluation_env_give_the_same_frames(env_id):
    """Same seed, same actions: every stacked observation and reward equal, up to and including the
    true final observation of the first episode (``info["final_obs"]``, SAME_STEP autoreset)."""
    vec = make_vector_env(env_id, 1, 0, EXACT)
    single = make_env(env_id, EXACT)
    v_obs, _ = vec.reset(seed=3)
    s_obs, _ = single.reset(seed=3)
    assert v_obs.shape == (1, 4, 84, 84) and v_obs.dtype == np.uint8
    np.testing.assert_array_equal(v_obs[0], s_obs)
    assert not v_obs[0, :3].any() and v_obs[0, 3].any()  # zero-padded before the first frame
    rng = np.random.default_rng(0)
    n = single.action_space.n
    for t in range(400):
        a = int(rng.integers(n))
        v_obs, v_r, v_term, v_trunc, info = vec.step(np.array([a]))
        s_obs, s_r, s_term, s_trunc, _ = single.step(a)
        assert v_r[0] == s_r and bool(v_term[0]) == s_term, t
        if s_term:
            np.testing.assert_array_equal(info["final_obs"][0], s_obs)
            break
        np.testing.assert_array_equal(v_obs[0], s_obs, err_msg=f"step {t}")
    vec.close()
    single.close()


def test_evaluation_plays_every_life_with_unclipped_scores():
    """Breakout has 5 lives; the evaluation env's episode ends only when the last is lost, whatever
    the training options (episodic life, clipping)."""
    env = make_env("ALE/Breakout-v5", AtariConfig(episodic_life=True, reward_clipping=True))
    env.reset(seed=0)
    lives_seen = set()
    for _ in range(20_000):
        _, _, term, trunc, info = env.step(env.action_space.sample())
        lives_seen.add(info["lives"])
        if term or trunc:
            break
    assert term and info["lives"] == 0 and {4, 3, 2, 1} <= lives_seen
    env.close()


def test_training_envs_clip_rewards_and_end_at_a_life_loss_when_asked():
    vec = make_vector_env("ALE/Breakout-v5", 2, 0, AtariConfig(episodic_life=True))
    vec.reset(seed=0)
    for _ in range(3_000):
        _, reward, term, _, info = vec.step(vec.action_space.sample())
        assert set(np.unique(reward)) <= {-1.0, 0.0, 1.0}
        if term.any():
            assert (info["lives"][term] > 0).all()  # ended by a life loss, not the game's end
            break
    assert term.any()
    vec.close()


def test_env_info_counts_frames_and_names_the_stack():
    info = env_info("ALE/Pong-v5")
    assert info.shape == (4, 84, 84) and info.num_actions == 6
    assert info.frame_stack == 4 and info.frame_skip == 4
    assert env_info("CartPole-v1").frame_skip == 1 and env_info("CartPole-v1").frame_stack == 0
    assert atari.frame_skip("ALE/Pong-v5") == 4 and atari.frame_skip("MinAtar/Breakout-v1") == 1
    assert atari._game("ALE/MontezumaRevenge-v5") == "montezuma_revenge"


@pytest.mark.parametrize("recipe", ["sf", "impala", "seed", "a3c", "apex", "vecenv"])
def test_every_recipe_picks_its_atari_preset_for_any_game(recipe):
    assert default_experiment(recipe, "ALE/Breakout-v5") == "atari"
    assert default_experiment(recipe, "MinAtar/Breakout-v1") == "minatar"  # an exact id still wins
    assert default_experiment(recipe, "CartPole-v1") == "default"


@pytest.mark.timeout(60)  # greedy, the two games take minutes: 27,000 steps each
def test_evaluation_of_a_policy_that_never_fires_ends_by_its_random_actions():
    """Breakout waits for FIRE after every lost life: a greedy NOOP policy would play out the
    27,000-step limit. Evaluation acts at random with probability ``atari.eval_epsilon`` (0.05)."""
    import torch

    from distrl.envs.gym import evaluate

    noop = lambda obs: torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(len(obs), 4)  # noqa: E731
    returns = evaluate(noop, "ALE/Breakout-v5", 2, seed=0, device=torch.device("cpu"))
    assert len(returns) == 2 and all(r >= 0 for r in returns)
    greedy = AtariConfig(eval_epsilon=0.0)
    assert atari.eval_epsilon("ALE/Breakout-v5", greedy) == 0.0 and atari.eval_epsilon("CartPole-v1") == 0.0
