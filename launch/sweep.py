"""Run one recipe over several seeds, each with a fixed budget and no early stop, and report the
distribution: a markdown table, JSON and every seed's training curves.

    python launch/sweep.py impala --seeds 0-9 --nproc 3 --max-time-s 90 --env CartPole-v1
    python launch/sweep.py vecenv --seeds 0-9 --parallel 2 --max-time-s 30

Options it does not know are passed to ``launch/train.py`` unchanged (``--set``, ``--env``...).
Each seed trains with ``--target-return`` (default 475) as a measurement only
(``run.early_stop=false``): the time it first reached it, the lowest training mean after, the
final greedy evaluation. Results go to ``--out`` (``sweep.md``, ``sweep.json``, ``curves.png``,
one run directory and log per seed).
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from distrl.sweep import run_sweep, seed_result, write_outputs  # noqa: E402


def parse_seeds(text: str) -> list[int]:
    """``"0-9"``, ``"0,3,5"`` or ``"0-2,7"`` as a list of ints."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()):
            raise ValueError(f"--seeds expects ranges like 0-9 or 0,3,5, got {text!r}")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return seeds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", help="recipe to sweep (impala, seed, vecenv, ...)")
    p.add_argument("--seeds", default="0-9", help="seeds: 0-9, 0,3,5 or 0-2,7 (default 0-9)")
    p.add_argument("--nproc", type=int, default=1, help="processes per seed (torchrun when > 1)")
    p.add_argument("--parallel", type=int, default=1, help="seeds run at the same time")
    p.add_argument("--max-time-s", type=float, default=90.0, help="training budget of every seed")
    p.add_argument("--target-return", type=float, default=475.0, help="the score whose first crossing is timed")
    p.add_argument("--hold-floor", type=float, default=250.0,
                   help="a seed holds when its training mean never falls below this after the target")
    p.add_argument("--out", help="output folder (default runs/sweep-<recipe>-<time>)")
    p.add_argument("--report-only", action="store_true", help="re-read the seeds already in --out; run nothing")
    args, train_args = p.parse_known_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.nproc < 1 or args.parallel < 1:
        print("error: --nproc and --parallel must be >= 1", file=sys.stderr)
        return 2
    out = Path(args.out or f"runs/sweep-{args.recipe}-{time.strftime('%Y%m%d-%H%M%S')}")
    train_args = [*train_args, "--max-time-s", str(args.max_time_s)]
    command = "python launch/sweep.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    if args.report_only:
        results = [seed_result(out / f"seed_{s}", s, args.target_return, args.hold_floor) for s in seeds]
    else:
        run_sweep(args.recipe, seeds, out, args.nproc, args.parallel, args.target_return, args.max_time_s, train_args)
        results = [seed_result(out / f"seed_{s}", s, args.target_return, args.hold_floor) for s in seeds]
    title = f"{args.recipe}, {len(seeds)} seeds, {args.nproc} process(es) each, {args.max_time_s:g} s budget"
    write_outputs(out, results, title, command)
    print((out / "sweep.md").read_text())
    print(f"[sweep] wrote {out / 'sweep.md'}, sweep.json, curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
