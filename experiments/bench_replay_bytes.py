"""Bytes per transition of an Ape-X replay shard's store filled with real Atari transitions.

    python -m experiments.bench_replay_bytes [--transitions 200000] [--env ALE/Pong-v5]

Real frames: one Ape-X actor of the ``atari`` preset (8 envs of ale-py's C++ ``AtariVectorEnv``,
unrolls of 64, n = 3) steps the game with uniformly random actions, and its own transition-cutting
code (``ApexActor.insert_message``: the carry, n-step returns, the frame-stack insert) makes every
message. Only its Q-network is a stand-in (zeros; it would set the initial priorities, which cost
the same bytes whatever they are, and the Nature CNN on 2 CPU cores would take most of the time).
Each message goes through the shard's unpacking (``unpack_frame_transitions``) into a
:class:`~distrl.replay.frame_store.FrameReplayStore` of ``--transitions`` capacity with the shard's
prioritized sampler, as a ``ReplayServer`` builds it; it is filled to capacity (and ``--wrap``
times more, to see FIFO at work). Printed: the store's bytes (every tensor: frame ring, transition
fields, frame ids, per-slot bookkeeping, sum tree, slot generations) per live transition and in
all, the frames stored per transition, and the insert messages' bytes per env step.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from distrl.config import override
from distrl.data import keys
from distrl.data.wire import payload_nbytes
from distrl.recipes.apex.actor import ApexActor
from distrl.recipes.apex.recipe import atari
from distrl.data.transitions import unpack_frame_transitions
from distrl.runtime.context import RoleContext
from distrl.replay.frame_store import FrameReplayStore
from distrl.replay.sum_tree import SumTreeSampler
from distrl.transport.local import LocalHub


class ZeroQ(torch.nn.Module):
    """Q-values of zeros ``[N, A]``: what the stand-in network answers for any observation ``[N, *F]``."""

    def __init__(self, num_actions: int):
        super().__init__()
        self.num_actions = num_actions

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], self.num_actions)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transitions", type=int, default=200_000, help="the store's capacity, filled")
    p.add_argument("--wrap", type=float, default=0.0, help="insert this many capacities more (FIFO)")
    p.add_argument("--env", default="ALE/Pong-v5")
    args = p.parse_args()
    cfg = override(atari(), **{"run.env": args.env, "run.logger": "none", "algo.min_replay_size": 0})
    cfg = override(cfg, **{"algo.capacity": args.transitions})
    hub = LocalHub(3)
    with tempfile.TemporaryDirectory() as tmp:
        actor = ApexActor(RoleContext(cfg, hub.endpoint(2), 2, {0: "learner", 1: "replay", 2: "actor"}, Path(tmp)))
    actor.model, actor.epsilon = ZeroQ(actor.num_actions), 1.0  # uniformly random actions
    replay = cfg.algo.replay
    store = FrameReplayStore(
        replay.capacity,
        None,
        sampler=SumTreeSampler(replay.capacity, replay.alpha, eps=replay.priority_eps),
        frame_room=replay.frame_room,
    )
    wire = steps = episodes = 0
    start = time.perf_counter()
    try:
        while store.inserted < replay.capacity * (1 + args.wrap):
            traj, returns, _ = actor.runner.unroll(actor._act, cfg.algo.unroll_length)
            episodes += len(returns)
            msg = actor.insert_message(traj)
            wire, steps = wire + payload_nbytes(msg), steps + msg[keys.PRIORITY].shape[0]
            frames, transitions, priority = unpack_frame_transitions(msg)
            if not store.extend(transitions, priority, frames):
                raise SystemExit("the store rejected an insert")
    finally:
        actor.runner.close()
        hub.close()
    took = time.perf_counter() - start
    total = store.nbytes()
    print(
        f"{args.env}: {store.inserted:,} transitions inserted in {took:.0f}s ({episodes} episodes ended), "
        f"{len(store):,} live of {replay.capacity:,} ({int(store.dead.sum())} dead)"
    )
    print(
        f"replay store: {total / len(store):,.0f} bytes per transition (bound 8,192), {total / 2**30:.2f} GiB in all; "
        f"{store.written / store.inserted:.3f} frames stored per transition, ring of {store.frame_capacity:,} frames "
        f"({store.frames.numel() * store.frames.element_size() / len(store):,.0f} bytes per transition)"
    )
    print(f"insert messages: {wire / steps:,.0f} bytes per env step (one 84x84 frame: 7,056)")
    print(f"1M transitions at this rate: {total / len(store) * 1e6 / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
