"""Benchmark: vecenv's end-to-end PPO training env-steps/s on torch CartPole, against the raw
batched env (the limit), against the same PPO on gymnasium's ``SyncVectorEnv``, and against
TorchRL's best collector layout collecting gymnasium CartPole alone.

    python -m experiments.bench_vecenv [--rounds 4] [--seconds 2] [--frames 3000000]
                                       [--collector-frames 150000] [--compile] [--threads 2] [--nproc 2]

Everything runs in this one invocation, timed as ``experiments/kit/measure.py`` says. The in-process
rows are measured in ``--rounds`` windows of ``--seconds`` each, round robin, after two steps left
out (warm-up, compilation), and every row reports its best window, so a burst of load from other
jobs on these shared machines hits every row alike. Rows:

1. raw env: ``TorchCartPole.step_autoreset`` on pre-sampled actions, ``B = algo.num_envs``;
2. vecenv PPO: the default experiment's learner loop (rollout, GAE, PPO epochs, statistics), in
   this process;
3. the same PPO (same learner code and config) with the env swapped for gymnasium's
   ``SyncVectorEnv`` of ``B`` CPU envs (``distrl.envs.batched:gym_vector_env``);
4. the same PPO on ``SyncVectorEnv`` sized as CleanRL's ``ppo.py`` (4 envs x 128 steps), the
   usual way to run PPO on CPU envs;
5. optional, in the same round robin: ``--compile`` (env dynamics and policy sampling through
   ``torch.compile``), ``--threads N`` (PPO with N intra-op threads during its windows);
6. the whole command ``launch/train.py vecenv`` for ``--frames`` frames (and with ``--nproc N``,
   torchrun with N data-parallel ranks): ``summary.json``'s ``fps_running`` (trained frames from
   the first update to the last: start-up and first update left out) and its best progress-line
   window (``run.log_interval_s``, 2 s), comparable to the rows above.

Each in-process row prints wall-clock steps/s and steps per CPU-second of this process (the
machines are shared: when other jobs take the cores, the wall figure falls and the CPU figure does
not). The whole command is wall clock only, and it is the figure held against TorchRL: TorchRL's
layouts of ``experiments/kit/yardstick.py`` and the env-only limit (gymnasium's ``SyncVectorEnv``)
before everything else, TorchRL's best layout again at the end, the higher figure the one to beat,
both sides timed from their first batch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import torch

from distrl.config import Config, override
from distrl.envs.torch_envs import make_torch_env
from distrl.recipes.vecenv.learner import VecEnvLearner
from distrl.recipes.vecenv.recipe import default
from distrl.runtime.context import RoleContext
from experiments.kit.measure import Meter, one_thread, round_robin
from experiments.kit.runs import train as train_command, trained_fps
from experiments.kit.yardstick import Yardstick


def raw_env(num_envs: int, compile_dynamics: bool = False) -> Meter:
    """torch CartPole's ``step_autoreset`` on pre-sampled actions, 8 steps of ``num_envs`` a call: the limit."""
    env = make_torch_env("CartPole-v1", num_envs, seed=0)
    if compile_dynamics:
        import torch._inductor.config as inductor_config  # here: only a --compile run loads inductor

        inductor_config.fallback_random = True  # without it the compiled step ran ~5x slower than eager
        env.dynamics = torch.compile(type(env).dynamics, dynamic=False)
    env.reset_all()
    actions = torch.randint(0, 2, (64, num_envs))
    i = [0]

    def step():
        for _ in range(8):
            env.step_autoreset(actions[i[0] % 64])
            i[0] += 1

    return Meter(
        "raw env step_autoreset" + (", compiled dynamics" if compile_dynamics else " (the limit)"), step, 8 * num_envs
    )


def train(name: str, cfg: Config, threads: int = 1) -> Meter:
    """The vecenv learner's loop with ``cfg`` (one ``iterate()`` = one update), in this process."""
    tmp = tempfile.mkdtemp()
    cfg = override(
        cfg,
        **{
            "run.logger": "none",
            "run.eval_episodes": 0,
            "run.target_return": None,
            "run.total_frames": 10**12,
            "run.max_time_s": 10**9,
            "run.log_interval_s": 10**9,
            "run.checkpoint_interval_s": 10**9,
            "run.run_dir": tmp,
        },
    )
    learner = VecEnvLearner(RoleContext(cfg, None, 0, {0: "learner"}, Path(tmp)))

    def close():
        learner.env.close()
        shutil.rmtree(tmp, ignore_errors=True)

    return Meter(name, learner.iterate, cfg.algo.frames_per_rank, close, threads)


def command(frames: int, nproc: int = 1) -> tuple[dict, float]:
    """``launch/train.py vecenv`` (under torchrun when ``nproc > 1``): ``(summary.json, best
    progress-line window's fps)``."""
    with tempfile.TemporaryDirectory() as tmp:
        s = train_command("vecenv", frames, nproc, ["--set", "run.target_return=none"], run_dir=Path(tmp))
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
        windows = [r["learner/fps"] for r in rows[1:-1]] or [float("nan")]  # first and last are partial
        return s, max(windows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one measuring window")
    ap.add_argument("--rounds", type=int, default=4, help="windows per row, round robin; the best is reported")
    ap.add_argument("--frames", type=int, default=3_000_000, help="frames of the launch/train.py rows")
    ap.add_argument(
        "--collector-frames",
        type=int,
        default=150_000,
        help="frames each TorchRL layout gathers after its first batch (0: skip TorchRL)",
    )
    ap.add_argument("--compile", action="store_true", help="also measure torch.compile of env and policy")
    ap.add_argument("--threads", type=int, default=0, help="also measure PPO with this many torch threads")
    ap.add_argument("--nproc", type=int, default=0, help="also measure torchrun with this many ranks")
    args = ap.parse_args()
    yard = Yardstick(args.collector_frames)
    yard.before()
    one_thread()
    cfg = default()
    b, t = cfg.algo.num_envs, cfg.algo.rollout_length
    gym = {"algo.env_factory": "distrl.envs.batched:gym_vector_env"}
    ppo, sync, clean = (
        "vecenv PPO training",
        f"same PPO on gymnasium SyncVectorEnv({b})",
        "same PPO on SyncVectorEnv(4) x 128 steps (CleanRL's size)",
    )
    meters = [
        raw_env(b),
        train(ppo, cfg),
        train(sync, override(cfg, **gym)),
        train(clean, override(cfg, **gym, **{"algo.num_envs": 4, "algo.rollout_length": 128})),
    ]
    if args.compile:
        meters += [
            raw_env(b, compile_dynamics=True),
            train("vecenv PPO, algo.compile=true", override(cfg, **{"algo.compile": True})),
        ]
    if args.threads:
        meters.append(
            train(
                f"vecenv PPO, {args.threads} torch threads",
                override(cfg, **{"run.torch_threads": args.threads}),
                threads=args.threads,
            )
        )
    rows = round_robin(meters, args.rounds, args.seconds)  # warm-up (and compilation) outside the windows

    print(
        f"torch CartPole, PPO B={b} x T={t}, {cfg.algo.epochs} epochs x {cfg.algo.num_minibatches} minibatches, "
        f"MLP {cfg.net.hidden} {cfg.net.activation}, 1 thread; best of {args.rounds} windows of {args.seconds:g} s, "
        f"round robin; env-steps/s wall | per CPU-second"
    )
    for name, (wall, cpu) in rows.items():
        print(f"  {name:58s} {wall:>12,.0f} | {cpu:>12,.0f}", flush=True)
    print(
        "  whole command, 1 thread a rank, wall clock: trained frames/s from the first update | best 2 s "
        "progress window"
    )
    runs = [("launch/train.py vecenv", 1)] + (
        [(f"torchrun {args.nproc} ranks x B={b}", args.nproc)] if args.nproc else []
    )
    summaries = {}
    for name, nproc in runs:
        summaries[name], best = command(args.frames, nproc)
        print(f"  {name:58s} {trained_fps(summaries[name]):>12,.0f} | {best:>12,.0f}", flush=True)
    yard.after()
    print("ratios of the in-process rows, best windows (wall | CPU):")
    for name in (sync, clean, "raw env step_autoreset (the limit)"):
        print(f"  vecenv PPO / {name:56s} {rows[ppo][0] / rows[name][0]:8.3g}x | {rows[ppo][1] / rows[name][1]:8.3g}x")
    if args.compile:
        c = rows["vecenv PPO, algo.compile=true"]
        print(f"  compiled / eager PPO {c[0] / rows[ppo][0]:8.3g}x | {c[1] / rows[ppo][1]:8.3g}x")
    print(
        f"ratios of the whole command, trained frames/s from the first update against {yard.best} (the limit of "
        f"torch CartPole is the raw env row, not gymnasium's env-only limit):"
    )
    for name, s in summaries.items():
        print(yard.line(name, s, of_limit=False))


if __name__ == "__main__":
    main()
