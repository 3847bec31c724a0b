"""distrl's replay role as a TorchRL-style buffer for a user's own loop: :class:`ReplayServiceBuffer`.

The shards are the very ``ReplayServer`` roles ``apex`` runs (prioritized, FIFO, rate-limited,
checkpointable) and sampling, importance weights and priority updates go through the learner's
``ShardedReplayClient``, so a user's loop gets the same semantics as the Ape-X learner:

    with ReplayServiceBuffer.local(capacity=100_000, shards=2, batch_size=256) as rb:
        rb.extend(transitions)                 # [N] TensorDict; its "td_error", if any, is the priority
        batch = rb.sample()                    # [256], with "index" and "priority_weight"
        batch["td_error"] = loss_fn(batch)     # e.g. TorchRL's DQNLoss writes it
        rb.update_tensordict_priority(batch)   # or rb.update_priority(batch, td_error)

:meth:`ReplayServiceBuffer.local` starts the shards in this process over the ``local`` transport
(threads, no torchrun); in a torchrun job, build it on the job's transport with the replay ranks.

Where it differs from ``torchrl.data.ReplayBuffer``: a priority update takes the sampled batch, not
a bare index (an index does not say which shard it is in, and the batch's slot generation lets a
shard drop an update for an item it has since overwritten); ``extend`` returns once a shard has
accepted the batch, which its loop writes a moment later, so ``len`` may lag it by a few
milliseconds; and ``sample`` waits (bounded) while every shard holds back, as the learner does.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Optional

import torch
from tensordict import TensorDict, TensorDictBase

from distrl.data import keys
from distrl.replay.store import Layout, layout_of
from distrl.replay.client import ShardedReplayClient
from distrl.replay.inserter import Inserter
from distrl.transport.base import Transport


class ReplayServiceBuffer:
    """``extend`` / ``sample`` / ``update_priority`` / ``len`` over replay shards (module docstring).

    Args:
        transport: this process's endpoint; shards: the ranks that run a ``ReplayServer``.
        batch_size: items per :meth:`sample` when it is given none.
        beta: importance-weight exponent (anneal it by setting the attribute).
        priority_key: the entry :meth:`extend` and :meth:`update_tensordict_priority` read.
        timeout: bound on each call, and on how long ``extend`` / ``sample`` wait while held.
    """

    def __init__(
        self,
        transport: Transport,
        shards: list[int],
        *,
        batch_size: Optional[int] = None,
        beta: float = 0.4,
        priority_key: str = "td_error",
        timeout: float = 30.0,
        seed: int = 0,
        hold_sleep_s: float = 0.01,
    ):
        if not shards:
            raise ValueError("ReplayServiceBuffer needs at least one replay shard rank")
        self.t, self.batch_size, self.beta, self.priority_key = transport, batch_size, beta, priority_key
        self.timeout, self.hold_sleep_s = timeout, hold_sleep_s
        self.client = ShardedReplayClient(transport, shards, timeout, seed, on_lost=self._lost)
        self.inserter = Inserter(transport, shards, timeout, hold_sleep_s, on_lost=self._lost)
        self.layout: Layout | None = None  # of the first batch: every shard refuses any other
        self._close: list = []  # what :meth:`close` ends besides the shards (local threads, hub)

    @classmethod
    def local(
        cls,
        capacity: int,
        *,
        shards: int = 1,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = 1e-6,
        min_size: int = 1,
        samples_per_insert: float = 0.0,
        spi_tolerance: float = 1e9,
        batch_size: Optional[int] = None,
        seed: int = 0,
        timeout: float = 30.0,
        **kwargs,
    ) -> "ReplayServiceBuffer":
        """``shards`` replay roles in this process (each ``capacity`` items; its own loop thread)
        behind one buffer, over the ``local`` transport: ranks 1..R are the shards, rank 0 this
        buffer. ``samples_per_insert > 0`` turns on each shard's rate limiter, as in ``apex``."""
        from distrl.config import Config, RunConfig, TransportConfig
        from distrl.runtime.context import RoleContext
        from distrl.replay.config import ReplayConfig
        from distrl.replay.server import ReplayServer
        from distrl.transport.local import LocalHub

        replay = ReplayConfig(
            capacity=capacity,
            alpha=alpha,
            priority_eps=priority_eps,
            min_size=min_size,
            samples_per_insert=samples_per_insert,
            spi_tolerance=spi_tolerance,
        )
        # A shard exits after 2 * call_timeout_s without a word from its learner: right for a dead
        # learner process, wrong for a user's loop that pauses. In-process shards end with close().
        cfg = Config(
            recipe="replay", algo=replay, run=RunConfig(seed=seed), transport=TransportConfig(call_timeout_s=1e9)
        )
        hub = LocalHub(1 + shards)
        ends = [hub.endpoint(r, timeout) for r in range(1 + shards)]
        roles = {0: "client", **{r: "replay" for r in range(1, 1 + shards)}}
        threads = []
        for r in range(1, 1 + shards):
            server = ReplayServer(RoleContext(cfg, ends[r], r, roles, Path(".")), replay)
            threads.append(threading.Thread(target=server.run, name=f"distrl-replay-{r}", daemon=True))
            threads[-1].start()
        rb = cls(
            ends[0], list(range(1, 1 + shards)), batch_size=batch_size, beta=beta, timeout=timeout, seed=seed, **kwargs
        )
        rb._close = [*threads, *ends]  # the threads first: the hub's pool ends with its last endpoint
        return rb

    def _lost(self, rank: int, reason: str) -> None:
        if rank not in self.t.lost_peers():
            self.t.mark_lost(rank, reason)
            print(f"[replay buffer] lost replay shard {rank}: {reason}; going on with the others", flush=True)

    # ---- the ReplayBuffer surface --------------------------------------------------------------
    def extend(self, data: TensorDictBase, priority: Optional[torch.Tensor] = None) -> None:
        """Insert ``data`` (``[N]``, or ``[*B]`` flattened to ``[N]``) into the next shard in turn,
        with raw priorities ``priority [N]`` (default: ``data[priority_key]`` if present, else the
        largest priority seen so far). Waits while the shard holds inserts back, up to ``timeout``."""
        data = data.reshape(-1)
        if priority is None:
            priority = data.get(self.priority_key, None)
        data = data.exclude(self.priority_key)
        layout = layout_of(data)
        if self.layout is not None and layout != self.layout:
            raise ValueError(
                f"extend: this batch's entries {sorted(map(str, layout))} or their shapes differ from "
                f"the first batch's {sorted(map(str, self.layout))}; a shard would refuse it"
            )
        self.layout = layout
        msg = TensorDict({keys.TRANSITIONS: data})
        if priority is not None:
            msg[keys.PRIORITY] = torch.as_tensor(priority, dtype=torch.float32).reshape(-1).cpu()
        if not self.client.live:
            raise RuntimeError("extend: every replay shard is gone")
        self.inserter.send(msg)
        settled = self.inserter.settle(deadline=time.monotonic() + self.timeout)
        if settled == Inserter.NO_SHARD:
            raise RuntimeError("extend: every replay shard is gone")
        if settled == Inserter.STOPPED:
            raise RuntimeError("extend: the replay service has stopped")
        if settled == Inserter.HELD:
            raise RuntimeError(
                f"extend: shard {self.inserter.shard} held the insert for {self.timeout:g}s (its queue "
                "is full or its rate limiter waits for samples)"
            )
        self.inserter.next_shard()  # batches go round robin over the shards

    def sample(self, batch_size: Optional[int] = None) -> TensorDictBase:
        """``[batch_size]`` items drawn by priority over every shard, with ``index``,
        ``index_generation``, ``replay_shard`` (what a priority update needs) and ``priority_weight``
        (``(P(i) / min_j P(j))^-beta`` over the whole buffer, as TorchRL's ``PrioritizedSampler``).
        The split over shards follows each shard's total priority as of its last reply, as the
        ``apex`` learner's does: one call behind the priority updates."""
        n = batch_size or self.batch_size
        if not n:
            raise ValueError("sample: give a batch_size here or to the buffer")
        parts, got, deadline = [], 0, time.monotonic() + self.timeout
        while got < n:
            batch = self.client.collect(self.client.request(n - got), self.beta, norm="buffer")
            if batch is not None:
                parts.append(batch)
                got += batch.shape[0]
                continue
            if not self.client.live:
                raise RuntimeError("sample: every replay shard is gone")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"sample: the shards held every request for {self.timeout:g}s (fewer items than "
                    "min_size, or the rate limiter waits for inserts)"
                )
            time.sleep(self.hold_sleep_s)
        return torch.cat(parts, 0) if len(parts) > 1 else parts[0]

    def update_priority(self, batch: TensorDictBase, priority: torch.Tensor) -> None:
        """New raw priorities ``priority [B]`` (``|td error|``) for the items of a sampled ``batch``;
        sent to their shards without waiting (an item overwritten since is skipped)."""
        if not isinstance(batch, TensorDictBase) or keys.REPLAY_SHARD not in batch.keys():
            raise TypeError(
                "update_priority takes the batch sample() returned (its index, generation and shard), not a bare index"
            )
        priority = torch.as_tensor(priority).detach().reshape(batch.shape[0], -1).amax(-1)
        self.client.update_priorities(batch, priority.abs())

    def flush(self) -> None:
        """Wait until every priority update sent so far has reached its shard."""
        self.client.wait_updates()

    def update_tensordict_priority(self, batch: TensorDictBase) -> None:
        """:meth:`update_priority` with ``batch[priority_key]`` (``[B]`` or ``[B, *]``, reduced by max)."""
        self.update_priority(batch, batch[self.priority_key])

    def __len__(self) -> int:
        """Items the live shards hold now (a blocking call to each)."""
        return sum(int(s[keys.SHARD_SIZE]) for s in self.client.stats_now().values())

    # ---- lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the shards (and, for :meth:`local`, end their threads and the in-process hub)."""
        self.client.stop(exit_=bool(self._close))
        for item in self._close:
            if isinstance(item, threading.Thread):
                item.join(timeout=5.0)
            else:
                item.close()
        self._close = []

    def __enter__(self) -> "ReplayServiceBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
