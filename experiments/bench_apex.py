"""Benchmark: the Ape-X learner's sampling rate with 1 and 2 replay shards, and its env frames/s
against TorchRL's best collector layout and the env-only limit.

    python -m experiments.bench_apex [--seconds 40] [--actors 2] [--collector-frames 150000]

Runs ``torchrun launch/train.py apex --env CartPole-v1`` twice in one invocation, with
``algo.shards=1`` (learner + 1 shard + actors) and ``algo.shards=2`` (one more process), the rate
limiter off (``algo.samples_per_insert=0``) so the learner samples as fast as it can, and prints
the learner's samples/s and updates/s (per wall-clock second of the learner's whole run), the env
frames/s and where the learner's time went (waiting for samples against updating).

Timed as ``experiments/kit/measure.py`` says: TorchRL's layouts of ``experiments/kit/yardstick.py`` and
the env-only limit before the runs, the best layout again after them (the higher figure is the one
to beat). Ape-X trains on what its replay holds, so its frames are the env frames its actors stored
there: ``fps_running`` of ``summary.json``, wall clock from the learner's first batch of them to
its last, as TorchRL's layouts are timed from their first batch.
"""

from __future__ import annotations

import argparse

from experiments.kit.runs import train, trained_fps
from experiments.kit.yardstick import Yardstick


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=40.0, help="training seconds of each run")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument(
        "--collector-frames",
        type=int,
        default=150_000,
        help="frames each TorchRL layout gathers after its first batch (0: skip TorchRL)",
    )
    args = ap.parse_args()
    yard = Yardstick(args.collector_frames)
    yard.before()
    print(f"apex on CartPole-v1, {args.actors} actors, {args.seconds:.0f} s each, rate limiter off")
    runs = {}
    for shards in (1, 2):
        nproc = 1 + shards + args.actors
        s = runs[shards] = train(
            "apex",
            10**12,
            nproc=nproc,
            extra=[
                "--max-time-s",
                str(args.seconds),
                "--set",
                f"algo.shards={shards}",
                "--set",
                "algo.samples_per_insert=0",
            ],
        )
        wall = s["wall_s"]
        print(
            f"shards={shards} ({nproc} processes): learner {s['replay_sampled'] / wall:>9,.0f} samples/s, "
            f"{s['learner_updates'] / wall:6.1f} updates/s (wall, whole run), {trained_fps(s):>8,.0f} env frames/s "
            f"into replay (wall, from the first batch); learner time {s['learner_wait_sample_s']:.1f} s waiting for "
            f"samples, {s['learner_update_s']:.1f} s updating",
            flush=True,
        )
    yard.after()
    print(f"ratios, env frames/s into replay from the first batch against {yard.best}:")
    for shards, s in runs.items():
        print(yard.line(f"apex, {shards} shard{'s' if shards > 1 else ''}", s, unit="env frames/s into replay"))


if __name__ == "__main__":
    main()
