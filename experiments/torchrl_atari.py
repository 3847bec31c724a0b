"""TorchRL collecting Pong with the recipes' actor-critic, in the layouts a knowledgeable user would
try, alone: the TorchRL row (a) of ``experiments/bench_atari.py``.

    python -m experiments.torchrl_atari [--net nature] [--seconds 20]

The layouts, the policy and the PPO update are :mod:`experiments.kit.pong`'s (its docstring lists
them): four layouts collecting only, then the three ale-py ones training with ``ClipPPOLoss``;
each timed by the wall clock from its first batch on.
"""

from __future__ import annotations

import argparse
import os

from experiments.kit.measure import cores
from experiments.kit.pong import SKIP, torchrl_layouts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", default="nature", help="encoder: nature or impala")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of each layout after its first batch")
    args = ap.parse_args()
    for name, fps in torchrl_layouts(args.net, cores(), args.seconds).items():
        print(
            f"torchrl {name}: {fps:,.0f} agent steps/s ({SKIP * fps:,.0f} frames/s), wall, from the first batch",
            flush=True,
        )
    os._exit(0)  # torchrl 0.14.1's WeightSyncScheme.__del__ hangs at interpreter exit


if __name__ == "__main__":
    main()
