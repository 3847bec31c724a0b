"""Benchmark: the pure-torch prioritized sampler, one core.

    python experiments/bench_sampler.py [--capacity 1048576] [--batch 512] [--seconds 3]

Each step samples a batch of ``--batch`` indices with their importance weights and writes new
priorities for them (what an Ape-X learner does per update), on a full tree of ``--capacity``
leaves, with one torch thread. It prints samples/s for the fan-out used by distrl (16), for a
binary tree (fan-out 2, the textbook sum tree) and for the whole TorchRL ``ReplayBuffer`` path
(index sampling plus gathering the items from a ``LazyTensorStorage`` of CartPole transitions).
The acceptance bar is 500,000 samples/s for the sampler, judged per second of CPU time of the
one core (the wall-clock figure is printed too; on a shared machine it is lower by the share of
the core other jobs take).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # distrl from this checkout

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer  # noqa: E402

from distrl.sum_tree import SumTreeSampler  # noqa: E402


class _Full:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def sampler_rate(capacity: int, batch: int, seconds: float, fanout: int) -> tuple[float, float]:
    """Samples/s of ``sample(batch)`` + ``update_priority`` on a full tree (median of 3 windows),
    per second of wall time and per second of this process's CPU time (the figure that holds
    when other jobs share the core)."""
    g = torch.Generator().manual_seed(0)
    s = SumTreeSampler(capacity, alpha=0.6, beta=0.4, fanout=fanout)
    s._rng = g
    s.extend(torch.arange(capacity))
    s.update_priority(torch.arange(capacity), torch.rand(capacity, generator=g, dtype=torch.float64))
    storage = _Full(capacity)
    wall, cpu = [], []
    for _ in range(3):
        n, start, start_cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds / 3:
            index, info = s.sample(storage, batch)
            s.update_priority(index, torch.rand(batch, generator=g, dtype=torch.float64))
            n += batch
        wall.append(n / (time.perf_counter() - start))
        cpu.append(n / max(time.process_time() - start_cpu, 1e-9))
    return sorted(wall)[1], sorted(cpu)[1]


def buffer_rate(capacity: int, batch: int, seconds: float) -> float:
    """Samples/s through a TorchRL ``TensorDictReplayBuffer`` (items gathered from storage too)."""
    s = SumTreeSampler(capacity, alpha=0.6, beta=0.4)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=s, batch_size=batch)
    chunk = 65536
    for start in range(0, capacity, chunk):
        m = min(chunk, capacity - start)
        rb.extend(TensorDict({"observation": torch.randn(m, 4), "action": torch.zeros(m, dtype=torch.long),
                              ("next", "observation"): torch.randn(m, 4), "nstep_return": torch.randn(m),
                              "bootstrap_discount": torch.rand(m)}, batch_size=[m]))
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        data, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], torch.rand(batch))
        n += batch
    return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--capacity", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"capacity {args.capacity:,}, batch {args.batch}, sample + update priorities, 1 torch thread")
    ours, ours_cpu = sampler_rate(args.capacity, args.batch, args.seconds, fanout=16)
    print(f"SumTreeSampler (fan-out 16):          {ours:>12,.0f} samples/s wall, {ours_cpu:>12,.0f} per CPU second  (bar: 500,000)")
    binary, binary_cpu = sampler_rate(args.capacity, args.batch, args.seconds, fanout=2)
    print(f"SumTreeSampler (fan-out 2, binary):   {binary:>12,.0f} samples/s wall, {binary_cpu:>12,.0f} per CPU second")
    rb = buffer_rate(args.capacity, args.batch, args.seconds)
    print(f"TensorDictReplayBuffer + SumTreeSampler, items gathered: {rb:>12,.0f} samples/s")
    print("PASS" if ours_cpu >= 500_000 else "BELOW THE BAR", "(per CPU second of one core; wall-clock figures fall "
          "with every other job on the core)")


if __name__ == "__main__":
    main()
