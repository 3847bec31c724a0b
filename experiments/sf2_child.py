"""Sample Factory 2's side of ``experiments/sf2_learn.py``: run inside SF2's venv (gymnasium 0.29,
ale-py 0.8.1, numpy < 2), never in distrl's environment, so it imports nothing of distrl.

    VENV/bin/python -m experiments.sf2_child --env NAME --ale_id ALE/Pong-v5 --sticky_actions 0.25 SF2_ARGS...
    VENV/bin/python -m experiments.sf2_child eval CONFIG_JSON CHECKPOINT... [--games 10] [--epsilon 0.05]

Training: SF2's Atari example (``sf_examples.atari``: its ``atari_params.py`` defaults, its
``make_atari_env`` with its own wrappers, unchanged) on an env SF2's example does not know: the
``-v5`` game ``gym.make(ale_id, frameskip=1, repeat_action_probability=sticky_actions)`` (its ALE
spec otherwise: minimal action set, 108,000 emulator frames at most), registered with gymnasium and
added to the example's ``ATARI_ENVS`` under SF2's ``--env`` name in every process that makes one
(SF2 spawns its workers: they unpickle :func:`make_env` and so import this module).

Evaluation: each checkpoint's policy plays ``--games`` whole games as distrl's
``experiments/eval_atari.py`` plays them (``distrl.envs.atari.make_atari_env``, rebuilt here for
gymnasium 0.29): every life, the game's own score, a one-frame FIRE at reset, ``AtariPreprocessing``
(30 no-ops, frame skip 4 with a max over the last two frames, 84x84 grayscale), a stack of 4
padded with zeros, the run's sticky actions; game ``i`` seeded ``10_000 + i``, a random action at
probability ``--epsilon`` (drawn from ``numpy.random.default_rng(i)``), else the most likely one.
One JSON line per checkpoint on stdout.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import sys
from collections import deque

import gymnasium as gym
import numpy as np
import torch
from sample_factory.algo.utils.rl_utils import prepare_and_normalize_obs
from sample_factory.envs.env_utils import register_env
from sample_factory.model.actor_critic import create_actor_critic
from sample_factory.model.model_utils import get_rnn_size
from sample_factory.train import run_rl
from sample_factory.utils.attr_dict import AttrDict
from sf_examples.atari import atari_utils
from sf_examples.atari.train_atari import parse_atari_args

SEED_BASE = 10_000  #: game i of an evaluation is reset with seed SEED_BASE + i, as eval_atari's
STEP_LIMIT = 27_000  #: agent steps of one evaluation game at most (108,000 emulator frames)
FRAME_SKIP, FRAME_STACK, SIZE = 4, 4, 84


def make_env(full_env_name: str, cfg, env_config=None, render_mode=None):
    """SF2's own ``make_atari_env`` on ``gym.make(cfg.ale_id, frameskip=1,
    repeat_action_probability=cfg.sticky_actions)``, registered first in this process."""
    if full_env_name not in gym.registry:
        spec = gym.spec(cfg.ale_id)
        kwargs = {**spec.kwargs, "frameskip": 1, "repeat_action_probability": cfg.sticky_actions}
        gym.register(full_env_name, entry_point=spec.entry_point, kwargs=kwargs)
        atari_utils.ATARI_ENVS.append(atari_utils.AtariSpec(full_env_name, full_env_name))
    return atari_utils.make_atari_env(full_env_name, cfg, env_config, render_mode)


def train(argv: list[str]) -> int:
    """SF2's ``train_atari.main`` with two arguments of ours (``--ale_id``, ``--sticky_actions``),
    kept in the run's ``config.json`` for the evaluation."""
    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--ale_id", required=True)
    ours.add_argument("--sticky_actions", type=float, default=0.25)
    extra, sf2_argv = ours.parse_known_args(argv)
    cfg = parse_atari_args(sf2_argv)
    register_env(cfg.env, make_env)
    cfg.ale_id, cfg.sticky_actions = extra.ale_id, extra.sticky_actions
    return run_rl(cfg)


class FireReset(gym.Wrapper):
    """distrl's ``FireReset``: one emulator frame of FIRE after a reset, below the frame skip."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        if "FIRE" in self.env.unwrapped.get_action_meanings():
            obs, _, term, trunc, info = self.env.step(1)
            if term or trunc:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class ZeroPaddedStack(gym.ObservationWrapper):
    """The last 4 frames ``uint8 [4, 84, 84]``, newest last, zeros before the first (gymnasium
    1.x's ``FrameStackObservation`` with ``padding_type`` zeros; 0.29's ``FrameStack`` repeats the
    first frame instead)."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0, 255, (FRAME_STACK, SIZE, SIZE), np.uint8)
        self.frames = deque(maxlen=FRAME_STACK)

    def reset(self, **kwargs):
        self.frames.extend(np.zeros((FRAME_STACK, SIZE, SIZE), np.uint8))
        return super().reset(**kwargs)

    def observation(self, frame):
        self.frames.append(frame)
        return np.stack(self.frames)


def make_eval_env(ale_id: str, sticky_actions: float) -> gym.Env:
    """distrl's evaluation env (``distrl.envs.atari.make_atari_env``): the full, unclipped game."""
    env = gym.make(ale_id, frameskip=1, repeat_action_probability=sticky_actions, max_num_frames_per_episode=108_000)
    env = gym.wrappers.AtariPreprocessing(
        FireReset(env), noop_max=30, frame_skip=FRAME_SKIP, screen_size=SIZE, terminal_on_life_loss=False
    )
    return ZeroPaddedStack(env)


def load_policy(cfg: AttrDict, path: str, env: gym.Env):
    """``obs uint8 [4, 84, 84] -> logits [A]`` of the checkpoint's actor-critic, built by SF2's
    ``create_actor_critic`` from the run's config (its input normalisation lives in the model)."""
    obs_space = gym.spaces.Dict({"obs": env.observation_space})
    model = create_actor_critic(cfg, obs_space, env.action_space)
    # SF2's own checkpoint, written by this run: it holds numpy scalars, which torch >= 2.6's
    # weights-only default refuses (SF2 2.1.1 predates that default)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=False)["model"])
    model.eval()  # the running mean and std of the inputs stay as saved
    rnn_states = torch.zeros(1, get_rnn_size(cfg))

    @torch.no_grad()
    def logits(obs: np.ndarray) -> torch.Tensor:
        normalized = prepare_and_normalize_obs(model, {"obs": torch.from_numpy(obs)[None]})
        return model(normalized, rnn_states)["action_logits"][0]

    return logits


def play(env: gym.Env, logits, seed: int, epsilon: float, rng: np.random.Generator) -> float:
    """One whole game's score: the most likely action, a random one at probability ``epsilon``."""
    obs, _ = env.reset(seed=seed)
    score = 0.0
    for _ in range(STEP_LIMIT):
        if epsilon and rng.random() < epsilon:
            action = int(rng.integers(env.action_space.n))
        else:
            action = int(logits(obs).argmax())
        obs, reward, term, trunc, _ = env.step(action)
        score += reward
        if term or trunc:
            break
    return score


def evaluate(argv: list[str]) -> None:
    """One JSON line per checkpoint: ``{"checkpoint", "scores", "mean", "median", "min", "max"}``,
    after one of the versions that ran."""
    ap = argparse.ArgumentParser(prog="sf2_child eval")
    ap.add_argument("config", help="the run's config.json")
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--games", type=int, default=10)
    ap.add_argument("--epsilon", type=float, default=0.05)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    with open(args.config) as f:
        cfg = AttrDict(json.load(f))
    versions = {p: importlib.metadata.version(p) for p in ("sample-factory", "gymnasium", "ale-py", "torch")}
    print(json.dumps({"versions": versions}), flush=True)
    env = make_eval_env(cfg.ale_id, cfg.sticky_actions)
    for path in args.checkpoints:
        logits = load_policy(cfg, path, env)
        scores = [play(env, logits, SEED_BASE + i, args.epsilon, np.random.default_rng(i)) for i in range(args.games)]
        summary = {"mean": statistics.mean(scores), "median": statistics.median(scores)}
        summary |= {"min": min(scores), "max": max(scores)}
        print(json.dumps({"checkpoint": path, "scores": scores, **summary}), flush=True)
    env.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["eval"]:
        evaluate(sys.argv[2:])
    else:
        sys.exit(train(sys.argv[1:]))
