"""Full-game scores of a trained Atari policy, greedy (epsilon 0.05) and sampled, beside a random policy.

    python -m experiments.eval_atari RUN_DIR [--games 10] [--checkpoint last]

Every game is the evaluation env of training (``distrl.envs.gym.make_env``: the full game, every
life, the game's own score, sticky actions 0.25), seeded ``10_000 + i`` as distrl's evaluations
are. Three policies play the same seeds: the run's policy by its mode with a random action at
probability ``atari.eval_epsilon`` (what training's evaluations report), the run's policy sampling
its actions (Sample Factory's default evaluation of an actor-critic), and uniform random actions.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch
from tensordict import TensorDict

from distrl.envs.gym import make_env
from distrl.nn.trained_policy import load_policy, load_run


@torch.no_grad()
def play(env_id: str, act, seed: int, rng: np.random.Generator, limit: int = 27_000) -> float:
    """One full game's score under ``act(obs [4, 84, 84] uint8) -> int``."""
    env = make_env(env_id)
    obs, _ = env.reset(seed=seed)
    score = 0.0
    for _ in range(limit):
        obs, reward, term, trunc, _ = env.step(act(obs, rng))
        score += reward
        if term or trunc:
            break
    env.close()
    return score


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--games", type=int, default=10)
    ap.add_argument("--checkpoint", default="last", help="best, last or a checkpoint file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg, _ = load_run(args.run_dir, args.checkpoint)
    env_id, epsilon = cfg["run"]["env"], cfg.get("atari", {}).get("eval_epsilon", 0.05)
    mode = load_policy(args.run_dir, checkpoint=args.checkpoint)
    sampled = load_policy(args.run_dir, checkpoint=args.checkpoint, sample=True)
    n = make_env(env_id).action_space.n

    def policy(module, eps: float):
        def act(obs, rng):
            if eps and rng.random() < eps:
                return int(rng.integers(n))
            action = module(TensorDict({"observation": torch.from_numpy(np.asarray(obs))[None]}, [1]))["action"][0]
            return int(action.argmax() if action.dim() else action)  # one-hot or an index

        return act

    players = {
        f"mode, epsilon {epsilon:g}": policy(mode, epsilon),
        "sampled": policy(sampled, 0.0),
        "random": lambda obs, rng: int(rng.integers(n)),
    }
    print(f"{env_id}, {args.games} full games each, run {args.run_dir} ({args.checkpoint} checkpoint)")
    for name, act in players.items():
        scores = [play(env_id, act, 10_000 + i, np.random.default_rng(i)) for i in range(args.games)]
        print(
            f"  {name:18s} mean {statistics.mean(scores):6.2f}  median {statistics.median(scores):6.1f}  "
            f"min {min(scores):5.1f}  max {max(scores):5.1f}"
        )


if __name__ == "__main__":
    main()
