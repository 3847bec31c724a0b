"""How a learner uses R replay shards as one prioritized buffer: sampling in proportion to each
shard's total priority, importance weights over all of them, priority updates routed back to the
shard each item came from, statistics, checkpoints of every shard's contents, shutdown; and
:class:`Inserter`, the one way transitions go in (Ape-X's actors, :class:`ReplayServiceBuffer`).

Every call is asynchronous and bounded by the transport's timeout, or by :data:`STATE_TIMEOUTS` of
them for the calls that move a shard's whole contents. The learner's loop is the only caller, so
nothing here runs on a transport thread.

A call that fails declares its shard lost; one that times out does not. A shard busy with one slow
call (serialising gigabytes of replay under its lock) makes the calls behind it time out, and is
still there: whether a shard is alive is for the learner's liveness pings to say, which a transport
thread answers without the shard's lock (and which a stopped shard leaves unanswered).
"""

from __future__ import annotations

import collections
import time
from concurrent.futures import Future
from typing import Callable, Optional

import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.replay.weights import shard_weights
from distrl.transport.base import CallTimeoutError, RemoteError, Transport, TransportError

#: the bound of ``replay_state`` and ``load_replay_state``, in call timeouts: the shard serialises or
#: loads its whole replay (1.4 GiB for an Atari shard of 1M transitions) inside the call
STATE_TIMEOUTS = 4


def nonfinite_inserts(replies: dict[int, TensorDict]) -> int:
    """Inserts the shards refused for a NaN or inf (a poisoned reward or priority), over the
    ``replay_stats`` replies ``replies``."""
    return sum(int(s["nonfinite"]) for s in replies.values() if "nonfinite" in s.keys())


class ShardedReplayClient:
    """The learner's side of the replay service (see the module docstring).

    Args:
        transport: the learner's endpoint; shards: the replay ranks.
        on_lost: called with ``(rank, reason)`` when a call to a shard fails (the session declares
            it lost, in one line); sampling goes on with the shards that are left.
    """

    def __init__(
        self,
        transport: Transport,
        shards: list[int],
        timeout: float,
        seed: int,
        on_lost: Callable[[int, str], None],
        stats_interval_s: float = 1.0,
    ):
        self.t, self.shards, self.timeout, self.on_lost = transport, list(shards), timeout, on_lost
        self.stats_interval_s = stats_interval_s
        self.generator = torch.Generator().manual_seed(seed)
        self.totals = {r: 0.0 for r in shards}  # last known sum of p^alpha per shard
        self.min_leaf = {r: float("inf") for r in shards}
        self.sizes = {r: 0 for r in shards}
        self.updates: collections.deque[Future] = collections.deque()  # priority updates in flight
        self.sampled = 0  # items received over the run
        self.timeouts = 0  # calls that timed out (their shard kept: liveness is the pings')
        self._stats: Optional[dict[int, Future]] = None
        self._last_stats = (time.monotonic(), 0, 0)  # (when, inserted, sampled) at the last poll
        self._wire: dict[int, tuple[int, int, int]] = {}  # rank -> its last (insert bytes, transitions, sample bytes)

    @property
    def live(self) -> list[int]:
        return [r for r in self.shards if r not in self.t.lost_peers()]

    def _result(self, rank: int, fut: Future) -> Optional[TensorDict]:
        """The reply; ``None`` if the shard is gone (declared lost) or the call timed out (a busy
        shard: counted, not lost); a handler's error is a bug and is raised."""
        try:
            return fut.result()
        except RemoteError:
            raise
        except CallTimeoutError:
            self.timeouts += 1
            return None
        except TransportError as e:  # lost, timed out, or a transport failure naming a dead peer
            self.on_lost(rank, str(e))
            return None

    # ---- sampling ----------------------------------------------------------------------------------
    def request(self, n: int) -> list[tuple[int, Future]]:
        """Ask the live shards for ``n`` items in all, split by a multinomial draw over their totals
        (equal shares while none is known yet).

        Every live shard is asked, even for 0 items, and each is charged ``n / R`` samples by its
        rate limiter whatever its share: the limiter then holds each shard's actors to the global
        ratio. (Charged by its own share, a shard whose items are rarely drawn would hold its
        actors for good: seen with 2 shards, where one actor stopped for minutes.)"""
        live = self.live
        if not live:
            return []
        mass = torch.tensor([self.totals[r] for r in live], dtype=torch.float64)
        mass = mass if mass.sum() > 0 else torch.ones(len(live), dtype=torch.float64)
        pick = torch.multinomial(mass, n, replacement=True, generator=self.generator)
        counts = torch.bincount(pick, minlength=len(live)).tolist()
        charge = torch.tensor(n / len(live))
        return [
            (
                r,
                self.t.call(
                    r, "sample", TensorDict({keys.SAMPLE_N: torch.tensor(c), keys.SAMPLE_CHARGE: charge}), self.timeout
                ),
            )
            for r, c in zip(live, counts)
        ]

    def _note(self, rank: int, reply: TensorDict) -> None:
        self.totals[rank] = float(reply[keys.SHARD_TOTAL])
        self.min_leaf[rank] = float(reply[keys.SHARD_MIN_LEAF])
        self.sizes[rank] = int(reply[keys.SHARD_SIZE])

    def collect(self, pending: list[tuple[int, Future]], beta: float, norm: str = "buffer") -> Optional[TensorDict]:
        """The items the shards served for ``pending`` as one ``[B]`` batch with importance weights
        (``keys.PRIORITY_WEIGHT``) and each item's shard (``keys.REPLAY_SHARD``); ``None`` if every
        shard held. ``norm="buffer"`` divides the weights by the largest any stored item could get
        (the smallest ``p^alpha`` of every shard), ``"batch"`` by the largest in this batch."""
        parts = []
        for rank, fut in pending:
            reply = self._result(rank, fut)
            if reply is None:
                continue
            self._note(rank, reply)
            if not bool(reply[keys.HELD]) and keys.TRANSITIONS in reply.keys():
                tr = reply[keys.TRANSITIONS]
                tr[keys.SAMPLE_LEAF], tr[keys.REPLAY_SHARD] = reply[keys.SHARD_LEAF], torch.full(tr.shape, rank)
                parts.append(tr)
        if not parts:
            return None
        batch = torch.cat(parts, 0)
        if norm == "batch" or not self.live:
            min_leaf = float(batch[keys.SAMPLE_LEAF].min())
        else:
            min_leaf = min(self.min_leaf[r] for r in self.live)
        batch[keys.PRIORITY_WEIGHT] = shard_weights(batch[keys.SAMPLE_LEAF], min_leaf, beta)
        self.sampled += batch.shape[0]
        return batch

    def update_priorities(self, batch: TensorDict, priority: torch.Tensor) -> None:
        """Send new raw priorities ``[B]`` of ``batch``'s items to their shards, not waiting; at most
        ``4 R`` updates stay in flight (the oldest is waited for beyond that)."""
        shard = batch[keys.REPLAY_SHARD]
        for rank in shard.unique().tolist():
            mine = shard == rank
            msg = TensorDict(
                {
                    keys.REPLAY_INDEX: batch[keys.REPLAY_INDEX][mine],
                    keys.REPLAY_GENERATION: batch[keys.REPLAY_GENERATION][mine],
                    keys.PRIORITY: priority[mine].float().cpu(),
                }
            )
            if rank not in self.t.lost_peers():
                fut = self.t.call(rank, "update_priorities", msg, self.timeout)
                fut.rank = rank
                self.updates.append(fut)
        while self.updates and (self.updates[0].done() or len(self.updates) > 4 * len(self.shards)):
            fut = self.updates.popleft()
            self._result(fut.rank, fut)

    def wait_updates(self) -> None:
        """Wait for every priority update in flight (each bounded by the timeout)."""
        while self.updates:
            fut = self.updates.popleft()
            self._result(fut.rank, fut)

    # ---- statistics ----------------------------------------------------------------------------------
    def poll_stats(self) -> dict[str, float]:
        """``replay/*`` metrics from the last poll's replies (if all came), and a new poll sent once
        ``stats_interval_s`` has passed since the last."""
        out: dict[str, float] = {}
        if self._stats is not None and all(f.done() for f in self._stats.values()):
            replies = {r: self._result(r, f) for r, f in self._stats.items()}
            replies = {r: s for r, s in replies.items() if s is not None}
            self._stats = None
            self._note_wire(replies)
            if replies:
                now = time.monotonic()
                inserted = sum(int(s["inserted"]) for s in replies.values())
                samples = sum(int(s["samples"]) for s in replies.values())
                then, ins0, smp0 = self._last_stats
                dt = max(now - then, 1e-9)
                self._last_stats = (now, inserted, samples)
                q = torch.stack([s["priority_q"] for s in replies.values()]).mean(0)
                out = {
                    "replay/size": sum(int(s[keys.SHARD_SIZE]) for s in replies.values()),
                    "replay/inserts_per_s": (inserted - ins0) / dt,
                    "replay/samples_per_s": (samples - smp0) / dt,
                    "replay/samples_per_insert": samples / max(inserted, 1),
                    "replay/priority_p50": float(q[0]),
                    "replay/priority_p90": float(q[1]),
                    "replay/priority_max": float(q[2]),
                    "replay/insert_held": sum(int(s["insert_held"]) for s in replies.values()),
                    "replay/sample_held": sum(int(s["sample_held"]) for s in replies.values()),
                    "replay/stale_priorities": sum(int(s["stale_priorities"]) for s in replies.values()),
                    "replay/nonfinite_inserts": nonfinite_inserts(replies),
                }
                wire_in, frames, wire_out = self.wire_totals()
                if frames:
                    out |= {
                        "replay/insert_bytes_per_env_step": wire_in / frames,
                        "replay/sample_bytes_per_env_step": wire_out / frames,
                    }
        if self._stats is None and time.monotonic() - self._last_stats[0] >= self.stats_interval_s:
            self._stats = {r: self.t.call(r, "replay_stats", None, self.timeout) for r in self.live}
        return out

    def _note_wire(self, replies: dict[int, TensorDict]) -> None:
        for r, s in replies.items():
            if "insert_bytes" in s.keys():
                self._wire[r] = (int(s["insert_bytes"]), int(s["insert_frames"]), int(s["sample_bytes"]))

    def wire_totals(self) -> tuple[int, int, int]:
        """``(insert bytes, transitions inserted, sample bytes)`` over every shard, as their last
        stats replies gave them (a lost shard keeps its last figures): the traffic of inserts into the
        shards and of samples out of them, and the transitions (env steps) the inserts carried."""
        return tuple(sum(w[i] for w in self._wire.values()) for i in range(3))

    # ---- checkpoint and shutdown ---------------------------------------------------------------------
    def stats_now(self) -> dict[int, TensorDict]:
        """Every live shard's ``replay_stats`` reply (blocking, bounded by the timeout)."""
        futs = {r: self.t.call(r, "replay_stats", None, self.timeout) for r in self.live}
        replies = {r: self._result(r, f) for r, f in futs.items()}
        replies = {r: reply for r, reply in replies.items() if reply is not None}
        self._note_wire(replies)
        return replies

    def states(self) -> dict[int, torch.Tensor]:
        """Every live shard's contents as the byte tensor it serialised them to (blocking, bounded by
        :data:`STATE_TIMEOUTS` call timeouts): the learner's checkpoint extra, handed back as is on
        resume. A shard that does not answer in time is left out of this checkpoint, in one line."""
        futs = {r: self.t.call(r, "replay_state", None, STATE_TIMEOUTS * self.timeout) for r in self.live}
        replies = {r: self._result(r, f) for r, f in futs.items()}
        for r in (r for r, reply in replies.items() if reply is None and r in self.live):
            print(
                f"[learner] replay shard {r} did not hand over its contents in time: not in this checkpoint", flush=True
            )
        return {r: reply[keys.SHARD_STATE] for r, reply in replies.items() if reply is not None}

    def load_states(self, states: dict[int, torch.Tensor]) -> None:
        """Give each shard back what the checkpoint holds for it."""
        for r, state in states.items():
            if r in self.live:
                msg = TensorDict({keys.SHARD_STATE: state})
                if self._result(r, self.t.call(r, "load_replay_state", msg, STATE_TIMEOUTS * self.timeout)) is None:
                    print(f"[learner] replay shard {r} did not take back its contents: it starts empty", flush=True)

    def stop(self, exit_: bool = False) -> None:
        """Tell the shards the run is over (inserts answer ``stop``); with ``exit_`` they also leave."""
        futs = {
            r: self.t.call(r, "replay_stop", TensorDict({keys.SHARD_EXIT: torch.tensor(exit_)}), self.timeout)
            for r in self.live
        }
        for r, f in futs.items():
            try:
                f.result()
            except TransportError:
                pass
