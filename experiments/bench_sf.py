"""Benchmark: Sample Factory's training fps against TorchRL's best collector layout collecting
alone, against ``impala`` and ``seed`` on the same machine, each as a fraction of the env-only limit.

    python -m experiments.bench_sf [--frames 1500000] [--collector-frames 400000] [--nproc 4]

All in one invocation (compare ratios within one run: the machines are shared), timed as
``experiments/kit/measure.py`` says (one thread a process; wall clock from the first batch on):
1. TorchRL's collectors in every layout of ``experiments/kit/yardstick.py`` (collecting only) and the
   env-only limit (2 processes stepping ``SyncVectorEnv(256)`` with random actions);
2. ``sf``, ``seed`` and ``impala`` under ``torchrun --nproc-per-node=NPROC`` on CartPole-v1 with
   their default configs, ``--frames`` trained frames each: trained frames/s from ``summary.json``
   (``fps_running``, from the learner's first batch to its last, as TorchRL's layouts are timed
   from their first batch; and ``fps``, over the whole run, start-up included), policy lag, and
   for ``sf`` the inference batch, the frames dropped for lag (not counted in any rate) and each
   role's time budget;
3. TorchRL's best layout once more; every recipe's ratio is against the higher of its two figures.
"""

from __future__ import annotations

import argparse

from experiments.kit.runs import budget_lines, train, trained_fps
from experiments.kit.yardstick import Yardstick

RECIPES = ("sf", "seed", "impala")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_500_000, help="training frames of each recipe's run")
    ap.add_argument(
        "--collector-frames",
        type=int,
        default=400_000,
        help="frames each TorchRL layout gathers after its first batch (0: skip TorchRL)",
    )
    ap.add_argument("--nproc", type=int, default=4, help="torchrun processes of every recipe (sf needs 3 or more)")
    args = ap.parse_args()

    yard = Yardstick(args.collector_frames)
    yard.before()
    results = {}
    for recipe in RECIPES:
        s = results[recipe] = train(recipe, args.frames, nproc=args.nproc)
        print(
            f"distrl {recipe:7s} torchrun {args.nproc} procs (training): {trained_fps(s):10,.0f} trained frames/s "
            f"from its first batch ({s['fps']:,.0f} over the whole run); lag mean {s['policy_lag_mean']:.2f}, "
            f"max {s['policy_lag_max']}",
            flush=True,
        )
    # The best layout once more, after the recipes: on these shared machines its figure moved by up
    # to a third between runs minutes apart, so each recipe is held against the higher of the two.
    yard.after()
    print(f"ratios, trained frames/s from the first batch against {yard.best}:")
    for recipe in RECIPES:
        print(yard.line(f"{recipe:7s}", results[recipe]))
    sf = results["sf"]
    ratio = lambda k, other: sf[k] / results[other][k]  # noqa: E731
    print(
        f"\nsf against seed: {ratio('fps_running', 'seed'):.2f}x ({ratio('fps', 'seed'):.2f}x over the whole run); "
        f"against impala: {ratio('fps_running', 'impala'):.2f}x ({ratio('fps', 'impala'):.2f}x)"
    )
    print(
        f"sf inference: {sf['inference_batch_envs_mean']:.0f} observations ({sf['inference_batch_fill_mean']:.2f} "
        f"groups) per batch, latency {sf['inference_latency_ms_mean']:.2f} ms (p95 "
        f"{sf['inference_latency_ms_p95']:.1f}); "
        f"frames dropped for lag (in no rate): {sf['frames_dropped']:,}; slot waits: {sf['slot_waits']:,}"
    )
    for recipe in RECIPES:
        print(f"  {recipe} time budget:")
        print("\n".join(budget_lines(results[recipe])))


if __name__ == "__main__":
    main()
