"""Benchmark: IMPALA's training fps against TorchRL's best collector layout collecting alone,
and against the env-only limit.

    python -m experiments.bench_impala [--frames 1500000] [--collector-frames 150000]
                                       [--variant FIELD=V,FIELD=V ...]

All in one invocation on this machine, with the same 2x64 policy MLP on CartPole-v1, timed as
``experiments/kit/measure.py`` says (one thread a process; wall clock from the first batch on):
1. TorchRL's collectors in every layout of ``experiments/kit/yardstick.py`` (collecting only), and
   the env-only limit (2 processes stepping ``SyncVectorEnv(256)`` with random actions);
2. ``torchrun --nproc-per-node=3 launch/train.py impala`` training for ``--frames`` frames
   (learner + 2 actors), and each ``--variant``: trained frames/s from ``summary.json``'s
   ``fps_running`` (from the learner's first batch to its last; ``fps``, over the whole run, beside
   it), lag, updates and where each role's time went;
3. TorchRL's best layout once more; impala's ratio is against the higher of its two figures.
"""

from __future__ import annotations

import argparse

from experiments.kit.runs import train, trained_fps
from experiments.kit.yardstick import Yardstick


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_500_000, help="impala training frames")
    ap.add_argument(
        "--collector-frames",
        type=int,
        default=150_000,
        help="frames each TorchRL layout gathers after its first batch (0: skip TorchRL)",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="FIELD=V,FIELD=V",
        help="also train impala with these config overrides (repeatable), e.g. "
        "algo.envs_per_actor=32,algo.unroll_length=32,algo.batch_trajectories=2",
    )
    args = ap.parse_args()
    yard = Yardstick(args.collector_frames)
    yard.before()
    runs = []
    for variant in ["", *args.variant]:
        sets = [w for kv in variant.split(",") if kv for w in ("--set", kv)]
        s = train("impala", args.frames, extra=sets)
        name = f"impala {variant}" if variant else "impala (defaults)"
        print(
            f"distrl {name}, torchrun 3 procs (training): {trained_fps(s):10,.0f} trained frames/s from its first "
            f"batch ({s['fps']:,.0f} over the whole run); lag mean {s['policy_lag_mean']:.2f}, "
            f"{s['learner_updates']} updates",
            flush=True,
        )
        for role, phases in s.get("time_budget", {}).items():  # where each role's time went
            print(f"    {role:10s} " + "  ".join(f"{k} {v:.2f}" for k, v in phases.items()), flush=True)
        runs.append((name, s))
    yard.after()
    print(f"ratios, trained frames/s from the first batch against {yard.best}:")
    for name, s in runs:
        print(yard.line(name, s), flush=True)


if __name__ == "__main__":
    main()
