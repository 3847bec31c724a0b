"""``distrl eval RUN_DIR``: play a trained policy for full episodes, report the returns with a
bootstrap interval, and record videos of the first episodes.

    distrl eval runs/impala-CartPole-v1 --episodes 20 --video videos/
    distrl eval runs/sf-pong --checkpoint last --policy sample

The policy is :func:`distrl.nn.trained_policy.load_policy`'s actor (the network, observation
normalisation and action encoding the run trained), and the episodes are played by
:func:`distrl.envs.gym.play_episodes`, the player behind every learner's own evaluation: the same env
(full Atari games, every life, unclipped scores; MinAtar with its time limit), one env per episode,
episode ``i`` seeded ``seed + i``. The default seed is the learners' (``run.seed + 10_000``), so
``--checkpoint last --episodes run.eval_episodes`` plays again the games ``summary.json`` scored.

``--policy``: ``greedy`` (the mode: argmax, a Gaussian's mean; every recipe's evaluation),
``sample`` (actions drawn from the policy: actor-critics only), or ``epsilon`` (greedy with a uniformly
random action at probability ``--epsilon``: the default for Atari at ``atari.eval_epsilon``, 0.05 as
in Mnih et al. 2015, since a greedy policy that never presses FIRE stalls a game).

``--max-steps N`` ends every episode after N steps, for a score under another time limit than
the env's (gymnax's MinAtar table cut episodes at 1,000 steps; distrl's limit is 10,000), and
``--sticky-actions P`` plays with another sticky-action probability than the run's (Atari's
``atari.sticky_actions``, MinAtar's package default 0.1; gymnax's MinAtar had none: ``0``).

``eval.json`` (``--out``, default ``RUN_DIR/eval.json``) holds the per-episode returns, lengths and
seeds, their mean, median, spread, a 95% percentile-bootstrap interval of the mean
(:func:`distrl.studies.stats.bootstrap_ci`, seeded by ``--seed``), and how far training had got at the
checkpoint (env frames, updates, seconds). Bad input (no run directory, no
checkpoint, a policy the run's network cannot play, an env that renders no frames for ``--video``)
is one line on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

POLICIES = ("greedy", "sample", "epsilon")
#: bootstrap resamples of the interval of the mean
REPS = 2000


def mean_interval(returns: list[float], seed: int, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile-bootstrap interval of the mean return: :data:`REPS` resamples, seeded."""
    from distrl.studies.stats import bootstrap_ci

    return bootstrap_ci(returns, statistics.fmean, REPS, confidence, seed)


def report(returns: list[float], lengths: list[int], seeds: list[int], seed: int) -> dict:
    """The figures of ``eval.json`` for episodes ``returns [N]``, ``lengths [N]`` played from ``seeds [N]``."""
    lo, hi = mean_interval(returns, seed)
    return {
        "episodes": len(returns),
        "mean": statistics.fmean(returns),
        "median": statistics.median(returns),
        "std": statistics.pstdev(returns),
        "min": min(returns),
        "max": max(returns),
        "ci95": [lo, hi],
        "ci_method": f"percentile bootstrap of the mean, {REPS} resamples, seed {seed}",
        "length_mean": statistics.fmean(lengths),
        "returns": returns,
        "lengths": lengths,
        "seeds": seeds,
    }


class Progress:
    """A progress bar on stderr while episodes play: redrawn in place on a terminal, else a line every
    ``every_s`` seconds (a log file stays readable)."""

    def __init__(self, episodes: int, every_s: float = 10.0):
        self.episodes, self.every_s = episodes, every_s
        self.tty = sys.stderr.isatty()
        self.start = self._last = time.monotonic()

    def __call__(self, finished: int, steps: int) -> None:
        now = time.monotonic()
        if now - self._last < (0.2 if self.tty else self.every_s) and finished < self.episodes:
            return
        self._last = now
        bar = "#" * (20 * finished // self.episodes)
        line = f"[eval] [{bar:<20}] {finished}/{self.episodes} episodes, {steps:,} steps, {now - self.start:.0f} s"
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)
        if self.tty and finished == self.episodes:
            print(file=sys.stderr)


def _parser():
    from distrl.runtime.args import OneLineParser, positive_int, probability

    p = OneLineParser(
        prog="distrl eval",
        description="Play a trained run's policy for full episodes: returns, a bootstrap interval of their "
        "mean, videos of the first episodes. Writes eval.json.",
    )
    p.add_argument("run_dir", help="the run directory (--run-dir of distrl train)")
    p.add_argument("--checkpoint", default="best", help="best (checkpoints/best.pt), last (the final policy) or a file")
    p.add_argument("--episodes", type=positive_int, default=10, help="full episodes to play, one env each")
    p.add_argument(
        "--policy",
        choices=POLICIES,
        default=None,
        help="greedy (the mode), sample, or epsilon-greedy (default: epsilon for Atari, else greedy)",
    )
    p.add_argument(
        "--epsilon", type=float, default=None, help="of --policy epsilon (default: the run's atari.eval_epsilon)"
    )
    p.add_argument("--seed", type=int, default=None, help="episode i plays from seed + i (default: run.seed + 10000)")
    p.add_argument(
        "--max-steps",
        type=positive_int,
        default=None,
        help="end each episode after this many steps, a shorter time limit than the env's (default: the env's)",
    )
    p.add_argument(
        "--sticky-actions",
        type=probability,
        default=None,
        metavar="P",
        help="Atari and MinAtar: the probability an action repeats the last (default: the run's; MinAtar's 0.1)",
    )
    p.add_argument("--video", metavar="DIR", default=None, help="write mp4 videos of the first episodes to DIR")
    p.add_argument("--video-episodes", type=positive_int, default=3, help="how many episodes --video records")
    p.add_argument("--out", default=None, help="the JSON report to write (default: RUN_DIR/eval.json)")
    return p


def _check_video(env_id: str, atari_opts) -> None:
    """Fail in one line, before anything plays, when ``env_id`` cannot render a frame here."""
    from distrl.envs import video
    from distrl.envs.gym import make_env

    mode = video.render_mode(env_id)
    if mode is not None:
        env = make_env(env_id, atari_opts)
        modes = env.metadata.get("render_modes", [])
        env.close()
        if mode not in modes:
            raise ValueError(f"--video: {env_id} renders no frames (its render modes: {modes or 'none'})")
    try:
        env = make_env(env_id, atari_opts, mode)
        try:
            env.reset(seed=0)
            if mode is not None and env.render() is None:
                raise ValueError("render() gave no frame")
        finally:
            env.close()
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise ValueError(
            f"--video: {env_id} renders no frames here ({type(e).__name__}: {first}); "
            'pip install -e ".[video]" in the checkout (pygame, OpenCV); MuJoCo needs MUJOCO_GL=egl or osmesa'
        ) from None


def evaluate_run(args) -> dict:
    """Play ``args``' episodes and return ``eval.json``'s content; ``ValueError`` in one line on bad input."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import Categorical

    from distrl.config import AtariConfig, from_dict
    from distrl.data import keys
    from distrl.envs import atari
    from distrl.envs.gym import env_info, play_episodes
    from distrl.envs.info import is_factory
    from distrl.nn.trained_policy import load_policy, load_run
    from distrl.roles.session import EVAL_SEED_OFFSET

    cfg, state = load_run(args.run_dir, args.checkpoint)
    tracker = state.get("tracker") or {}  # how far training was when the checkpoint was written
    env_id = cfg["run"]["env"]
    if is_factory(env_id):
        raise ValueError(
            f"distrl eval plays gymnasium ids; {env_id} is a TorchRL factory: roll out distrl.load_policy "
            "in your env (docs/torchrl.md)"
        )
    atari_opts = from_dict(AtariConfig, cfg["atari"]) if "atari" in cfg else None
    sticky = args.sticky_actions
    if sticky is not None and atari.is_atari(env_id):
        atari_opts = dataclasses.replace(atari_opts or AtariConfig(), sticky_actions=sticky)
    elif sticky is not None and not env_id.startswith("MinAtar/"):
        raise ValueError(f"--sticky-actions is for ALE/* and MinAtar/* ids, not {env_id}")
    minatar_sticky = sticky if env_id.startswith("MinAtar/") else None
    policy = args.policy or ("epsilon" if atari.is_atari(env_id) else "greedy")
    epsilon = args.epsilon if args.epsilon is not None else (atari_opts or AtariConfig()).eval_epsilon
    if policy == "epsilon" and not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"--epsilon must be in [0, 1], got {epsilon}")
    seed = cfg["run"].get("seed", 0) + EVAL_SEED_OFFSET if args.seed is None else args.seed
    info = env_info(env_id)
    if policy == "epsilon" and info.num_actions is None:
        raise ValueError(f"--policy epsilon takes discrete actions; {env_id}'s are continuous: use greedy or sample")
    if args.video is not None:
        _check_video(env_id, atari_opts)
    spec = Categorical(info.num_actions) if info.num_actions is not None else None  # index actions, as gymnasium's
    actor = load_policy(args.run_dir, checkpoint=args.checkpoint, sample=policy == "sample", action_spec=spec)
    torch.manual_seed(seed)  # --policy sample draws from torch's generator

    masked = keys.ACTION_MASK in actor.in_keys  # the env's mask is the observation's last A entries (make_env)

    def act(obs: torch.Tensor) -> torch.Tensor:
        td = {actor.in_keys[0]: obs}
        if masked:
            td = {actor.in_keys[0]: obs[..., : -info.num_actions], keys.ACTION_MASK: obs[..., -info.num_actions :] > 0}
        return actor(TensorDict(td, batch_size=[obs.shape[0]])).get(keys.ACTION)

    start = time.monotonic()
    played = play_episodes(
        act,
        env_id,
        args.episodes,
        seed,
        atari_opts,
        epsilon if policy == "epsilon" else 0.0,
        video_dir=None if args.video is None else Path(args.video),
        videos=args.video_episodes,
        on_step=Progress(args.episodes),
        max_steps=args.max_steps,
        minatar_sticky=minatar_sticky,
    )
    recorded = min(args.video_episodes, args.episodes) if args.video else 0
    videos = [str(Path(args.video) / f"episode-{i:03d}.mp4") for i in range(recorded)]  # play_episodes' names
    return {
        "run_dir": str(args.run_dir),
        "recipe": cfg.get("recipe"),
        "env": env_id,
        "checkpoint": args.checkpoint,
        "trained": {k: tracker.get(k) for k in ("env_frames", "updates", "wall_s")},
        "policy": policy,
        "epsilon": epsilon if policy == "epsilon" else 0.0,
        "seed": seed,
        "max_steps": args.max_steps,
        "sticky_actions": sticky,  # None: the run's
        **report(played.returns, played.lengths, played.seeds, seed),
        "videos": videos,
        "wall_s": time.monotonic() - start,
    }


def main(argv: Optional[list[str]] = None) -> int:
    """``distrl eval``: one line on stderr and exit status 2 on bad input."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.video is not None:
        _headless_video(args.run_dir)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small batches, one step at a time: a second thread only waits on the first
    try:
        result = evaluate_run(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        torch.set_num_threads(threads)  # as it was, for a caller in the same process
    out = Path(args.out) if args.out else Path(args.run_dir) / "eval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    lo, hi = result["ci95"]
    where = f", videos in {args.video}" if result["videos"] else ""
    trained = result["trained"]["env_frames"]
    frames = f" ({trained:,} frames)" if trained is not None else ""
    print(
        f"[eval] {result['env']}, {result['episodes']} episodes, {result['checkpoint']} checkpoint{frames}, "
        f"{result['policy']}: mean {result['mean']:.2f} (95% CI {lo:.2f} to {hi:.2f}), median {result['median']:.2f}, "
        f"min {result['min']:.2f}, max {result['max']:.2f}; written to {out}{where}",
        flush=True,
    )
    return 0


def _headless_video(run_dir: str) -> None:
    """Renderers set up before they are imported (torchrl imports mujoco): pygame quiet, and where no
    display is set, SDL's dummy video driver (classic control) and, for a MuJoCo run, EGL
    (``MUJOCO_GL``); a variable the user set is kept."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    if os.environ.get("DISPLAY"):
        return
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        import gymnasium as gym

        env_id = json.loads((Path(run_dir) / "config.json").read_text())["run"]["env"]
        entry = gym.spec(env_id).entry_point
    except Exception:  # not a run, or not a gymnasium id: evaluate_run says so in one line
        return
    if "mujoco" in (entry if isinstance(entry, str) else getattr(entry, "__module__", "")):
        os.environ.setdefault("MUJOCO_GL", "egl")


if __name__ == "__main__":
    sys.exit(main())
