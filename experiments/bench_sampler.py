"""Benchmark: the pure-torch prioritized sampler against an independent brute-force sampler, one core.

    python -m experiments.bench_sampler [--capacity 1048576] [--batch 512] [--seconds 3]

Each step samples a batch of ``--batch`` indices with their importance weights and writes new
priorities for them (what an Ape-X learner does per update), on ``--capacity`` items that all
hold a priority, with one torch thread. Rows, one after another:

- ``SumTreeSampler`` (``distrl/replay/sum_tree.py``) at the fan-out distrl uses (16);
- the same code at fan-out 2, the textbook binary sum tree (the same implementation: this row
  shows what the fan-out buys, not how another implementation fares);
- an independent alternative with no tree at all: numpy's ``cumsum`` over every priority, then
  ``searchsorted`` of the batch's uniform draws, the weights normalised by the smallest priority
  (``min`` over every priority), the new priorities written in place: ``O(capacity)`` a batch, the
  way one writes it without a tree (TorchRL's own ``PrioritizedSampler`` cannot be the alternative
  here: its C++ extension does not load with torch 2.13.0+cpu);
- the whole TorchRL ``ReplayBuffer`` path with ``SumTreeSampler`` (index sampling plus gathering
  the items from a ``LazyTensorStorage`` of CartPole transitions).

Timed by ``experiments/kit/measure.py``'s ``timed``: one step left out, then three windows of
``--seconds / 3``, the median window printed by both clocks, samples per wall-clock second and
per CPU-second of this process. The acceptance bar is 500,000 samples/s for the sampler, judged
per CPU-second of the one core (on a shared machine the wall figure is lower by the share of the
core other jobs take).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from distrl.replay.sum_tree import SumTreeSampler
from experiments.kit.measure import one_thread, timed

ALPHA, BETA = 0.6, 0.4


class _Full:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def rate(step, seconds: float) -> tuple[float, float]:
    """``(samples/s wall, samples/s per CPU-second)`` of ``step`` (returns samples), median of 3 windows."""
    step()
    windows = [timed(step, seconds / 3, warmup=0) for _ in range(3)]
    return statistics.median(w.wall for w in windows), statistics.median(w.cpu for w in windows)


def tree_step(capacity: int, batch: int, fanout: int):
    """One ``sample`` + ``update_priority`` of a full :class:`SumTreeSampler`."""
    g = torch.Generator().manual_seed(0)
    s = SumTreeSampler(capacity, alpha=ALPHA, beta=BETA, fanout=fanout)
    s._rng = g
    s.extend(torch.arange(capacity))
    s.update_priority(torch.arange(capacity), torch.rand(capacity, generator=g, dtype=torch.float64))
    storage = _Full(capacity)

    def step() -> int:
        index, info = s.sample(storage, batch)
        s.update_priority(index, torch.rand(batch, generator=g, dtype=torch.float64))
        return batch

    return step


def brute_force_step(capacity: int, batch: int):
    """The same step without a tree: ``cumsum`` + ``searchsorted`` over every priority."""
    rng = np.random.default_rng(0)
    p = rng.random(capacity) ** ALPHA  # p_i^alpha of every item

    def step() -> int:
        c = np.cumsum(p)
        index = np.minimum(np.searchsorted(c, rng.random(batch) * c[-1], side="right"), capacity - 1)
        weight = (p[index] / p.min()) ** -BETA  # (N P(i))^-beta over its maximum, (N P_min)^-beta
        p[index] = (rng.random(batch) + 1e-6) ** ALPHA
        return len(weight)

    return step


def buffer_step(capacity: int, batch: int):
    """One ``sample`` (items gathered) + ``update_priority`` through a TorchRL ``TensorDictReplayBuffer``."""
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity), sampler=SumTreeSampler(capacity, ALPHA, BETA), batch_size=batch
    )
    chunk = 65536
    for start in range(0, capacity, chunk):
        m = min(chunk, capacity - start)
        rb.extend(
            TensorDict(
                {
                    "observation": torch.randn(m, 4),
                    "action": torch.zeros(m, dtype=torch.long),
                    ("next", "observation"): torch.randn(m, 4),
                    "nstep_return": torch.randn(m),
                    "bootstrap_discount": torch.rand(m),
                },
                batch_size=[m],
            )
        )

    def step() -> int:
        data, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], torch.rand(batch))
        return batch

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capacity", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds of each row (three windows)")
    args = ap.parse_args()
    one_thread()
    print(
        f"capacity {args.capacity:,}, batch {args.batch}, sample + update priorities, 1 torch thread; "
        f"samples/s wall | per CPU-second"
    )
    rows = [
        ("SumTreeSampler, fan-out 16", tree_step(args.capacity, args.batch, 16)),
        ("SumTreeSampler, fan-out 2 (same code, binary)", tree_step(args.capacity, args.batch, 2)),
        ("brute force: numpy cumsum + searchsorted", brute_force_step(args.capacity, args.batch)),
        ("TensorDictReplayBuffer + SumTreeSampler, items gathered", buffer_step(args.capacity, args.batch)),
    ]
    rates = {}
    for name, step in rows:
        rates[name] = rate(step, args.seconds)
        print(f"  {name:56s} {rates[name][0]:>12,.0f} | {rates[name][1]:>12,.0f}", flush=True)
    ours, brute = rates[rows[0][0]], rates[rows[2][0]]
    print(f"fan-out 16 against brute force: {ours[0] / brute[0]:.1f}x wall | {ours[1] / brute[1]:.1f}x CPU")
    print(
        "PASS" if ours[1] >= 500_000 else "BELOW THE BAR",
        "(500,000 per CPU-second of one core; wall-clock figures fall with every other job on the core)",
    )


if __name__ == "__main__":
    main()
