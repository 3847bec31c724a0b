"""Plot learning curves of one or more runs side by side.

    python launch/plot.py runs/impala-... runs/seed-... --out compare.png [--x time]

Reads each run directory's ``metrics.jsonl`` (see ``distrl/plots.py``); bad input is one line
on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from distrl.plots import plot_runs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", help="run directories (each with a metrics.jsonl)")
    p.add_argument("--out", default="curves.png", help="PNG to write")
    p.add_argument("--x", choices=("frames", "time"), default="frames", help="x axis: env frames or seconds")
    args = p.parse_args(argv)
    missing = [d for d in args.run_dirs if not (Path(d) / "metrics.jsonl").is_file()]
    if missing:
        print(f"error: no metrics.jsonl in {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        out = plot_runs(args.run_dirs, args.out, x=args.x)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
