"""The yardsticks every CartPole benchmark prints, alone: TorchRL's collectors in the layouts a
knowledgeable user would try (the best one found in the same run is the one to beat), and the
env-only limit.

    python -m experiments.baselines [--frames 200000] [--envs 8,64,256] [--procs 2]

The layouts and the limit are :mod:`experiments.kit.yardstick`'s (its docstring lists them); every
benchmark measures them through its ``Yardstick`` before and after distrl's runs. Timing
(:mod:`experiments.kit.measure`): one torch thread in this process before the first layout is
built (the collector's workers get one each), every layout timed by the wall clock from its first
batch on (worker start, first resets and the first batch left out), as distrl's runs are by
``fps_running``.
"""

from __future__ import annotations

import argparse

from experiments.kit.measure import one_thread
from experiments.kit.yardstick import report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200_000, help="frames each collector layout gathers")
    ap.add_argument("--envs", default="64,256", help="envs per worker of the vector-env layouts")
    ap.add_argument("--procs", type=int, default=2, help="collector worker processes (and env-only processes)")
    args = ap.parse_args()
    one_thread()
    report(args.frames, tuple(int(n) for n in args.envs.split(",")), args.procs)


if __name__ == "__main__":
    main()
