"""The replay role: one shard of a prioritized replay service that any recipe can put on a rank.

It serves, over the transport:

* ``insert``: transitions ``[N]`` with raw priorities ``[N]`` (without them, the largest priority
  seen so far, as TorchRL gives new items: ``distrl.ReplayServiceBuffer.extend``), or an Ape-X
  actor's packed window (:mod:`distrl.data.transitions`: each observation once), which
  the loop unpacks into the same transitions. A window of frame stacks (Atari) is kept so, each
  frame once: the first such insert into an empty shard makes its store a
  :class:`~distrl.replay.frame_store.FrameReplayStore` (``ReplayConfig.frame_room``). The
  handler only checks the rate limiter and enqueues (a bounded queue, ``ReplayConfig.queue_size``); this role's own
  loop writes
  them into the :class:`~distrl.replay.store.ReplayStore`. A full queue or the limiter answers
  ``held``: the actor keeps its message and tries again, so it is the actor that waits, never a
  transport thread. The actor asks with ``insert_probe`` (the message's size only) until the shard
  would take it, then sends the message again, marked ``insert_probed``: that one is taken while the
  limiter is still within its tolerance before it (another sender's insert may have come between
  the probe and it; the ratio then overshoots by at most this insert), so a held message crosses
  the wire once more, not once per retry.
* ``sample``: ``n`` transitions drawn by priority, with each item's ``p^alpha``, its index and
  slot generation, and the shard's total, minimum and size (the learner turns those into
  importance weights over every shard: see :func:`shard_weights`). ``held`` when the shard holds
  fewer than ``ReplayConfig.min_size`` items or the limiter says the learner is ahead; the limiter
  counts the ``charge`` the learner gives (its batch over R), not ``n``.
* ``update_priorities``: new ``|delta|`` for sampled items (stale ones dropped by generation).
* ``replay_stats`` (with the bytes of every insert and sample message and reply, for the
  recipe's ``bytes_per_env_step``), ``replay_state`` / ``load_replay_state`` (the learner
  checkpoints every shard's contents with its own), ``replay_stop``.

How long a shard serves, through a busy or paused learner and after a stop signal (SIGTERM,
SIGINT, SIGHUP, SIGQUIT, which the whole job gets together), is :mod:`distrl.replay.learner_watch`'s.

Sampling and updates run in the handler under the shard's lock: each is one bounded tree
operation (well under a millisecond at 2^20 items, ``experiments/bench_sampler.py``), and a
transport thread never waits on another call.
"""

from __future__ import annotations

import io
import queue
import threading

import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.runtime.context import RoleContext
from distrl.replay.learner_watch import LearnerWatch
from distrl.data import keys
from distrl.data.wire import WireMeter, payload_nbytes
from distrl.data.transitions import is_frames, is_packed, packed_count, unpack_frame_transitions, unpack_transitions
from distrl.replay.config import ReplayConfig
from distrl.replay.frame_store import FrameReplayStore
from distrl.replay.store import ReplayStore, SamplesPerInsertLimiter, all_finite
from distrl.replay.sum_tree import SumTreeSampler

#: the transitions ``[]`` int64 of the insert a held sender keeps, in an ``insert_probe``
INSERT_N = "insert_n"
#: ``[]`` bool on an insert sent because a probe said the shard would take it
INSERT_PROBED = "insert_probed"


class ReplayServer:
    """One prioritized replay shard (see the module docstring), e.g. ranks 1..R of ``apex``.

    Its settings are ``replay``, or else the recipe's ``ctx.cfg.algo.replay``; the seed comes from
    ``ctx.cfg.run`` and the idle bound from ``ctx.cfg.transport``.
    """

    def __init__(self, ctx: RoleContext, replay: ReplayConfig | None = None):
        self.ctx, self.cfg = ctx, ctx.cfg
        self.replay = a = replay if replay is not None else ctx.cfg.algo.replay
        self.sampler = SumTreeSampler(a.capacity, alpha=a.alpha, beta=1.0, eps=a.priority_eps)
        # the sampler's draws: the store's buffer sets it on the sampler and keeps its state in the store's
        # (so in this shard's checkpoint); set on the sampler directly, it was replaced by torch's global one
        self.generator = torch.Generator().manual_seed(self.cfg.run.seed + 7919 * ctx.rank)
        # (sized None: the learner's split sets each size)
        self.store = ReplayStore(a.capacity, None, sampler=self.sampler, generator=self.generator)
        self._stats_rng = torch.Generator().manual_seed(self.cfg.run.seed + 7919 * ctx.rank + 1)  # not the samples'
        self.limiter = SamplesPerInsertLimiter(a.samples_per_insert, a.spi_tolerance, a.min_size)
        self.lock = threading.Lock()
        self.inbox: queue.Queue = queue.Queue(maxsize=a.queue_size)
        self.stopped = threading.Event()  # inserts refused: the run is over
        self.exit = threading.Event()  # the loop ends
        learner, t = (ctx.ranks_of("learner") or [None])[0], self.cfg.transport
        #: the learner's words (its calls and pings), pinging it when it is quiet, the stop signals
        self.watch = LearnerWatch(
            ctx.transport, learner, f"[replay {ctx.rank}]", a.idle_s, self.cfg.run.watchdog_s, t.call_timeout_s
        )
        self.loops = 0  # insert messages taken by the loop
        #: ``nonfinite``: inserts refused for a NaN/inf value or priority (a NaN priority would make
        #: the sum tree's total NaN: every later sample broken, and the tree checkpointed so)
        self.counts = {"insert_held": 0, "sample_held": 0, "rejected": 0, "stale_priorities": 0, "nonfinite": 0}
        self.inserts = WireMeter()  # insert messages and replies (held ones too), per transition taken
        self.sample_bytes = 0  # sample messages and replies (under the lock)
        serve = ctx.transport.serve
        serve("insert", self._insert)
        serve("insert_probe", self._insert_probe)
        serve("sample", self._sample)
        serve("update_priorities", self._update_priorities)
        serve("replay_stats", self._replay_stats)
        serve("replay_state", self._replay_state)
        serve("load_replay_state", self._load_replay_state)
        serve("replay_stop", self._replay_stop)
        serve("ping", self._pinged)  # only the learner pings a shard: its pings are a word from it

    # ---- handlers (transport threads: bounded work under the lock, never a call out) ------------
    def _pinged(self, _msg) -> None:
        self.watch.word()

    def _insert(self, msg: TensorDict) -> TensorDict:
        n = packed_count(msg) if is_packed(msg) else msg[keys.TRANSITIONS].shape[0]
        with self.lock:
            fits = self.limiter.can_insert(n) or (INSERT_PROBED in msg.keys() and self.limiter.can_insert(0))
            ok = not self.stopped.is_set() and fits
            if ok:
                try:
                    self.inbox.put_nowait(msg)
                    self.limiter.inserts += n
                except queue.Full:
                    ok = False
            if not ok:
                self.counts["insert_held"] += 1
        reply = TensorDict({keys.HELD: torch.tensor(not ok), keys.STOP: torch.tensor(self.stopped.is_set())})
        self.inserts.add(payload_nbytes(msg) + payload_nbytes(reply), n if ok else 0)
        return reply

    def _insert_probe(self, msg: TensorDict) -> TensorDict:
        """``held`` unless an insert of ``insert_n`` transitions would be taken now (nothing is kept
        for it: the sender's insert that follows may still be held, when another came first)."""
        with self.lock:
            ok = not self.stopped.is_set() and self.limiter.can_insert(int(msg[INSERT_N])) and not self.inbox.full()
        reply = TensorDict({keys.HELD: torch.tensor(not ok), keys.STOP: torch.tensor(self.stopped.is_set())})
        self.inserts.add(payload_nbytes(msg) + payload_nbytes(reply), 0)
        return reply

    def _sample(self, msg: TensorDict) -> TensorDict:
        n = int(msg[keys.SAMPLE_N])
        charge = float(msg[keys.SAMPLE_CHARGE]) if keys.SAMPLE_CHARGE in msg.keys() else n  # what the limiter counts
        self.watch.word()
        with self.lock:
            if len(self.store) == 0 or not self.limiter.can_sample(charge):
                self.counts["sample_held"] += 1
                reply = TensorDict({keys.HELD: torch.tensor(True), **self._totals()})
            else:
                self.limiter.samples += charge
                if n == 0:
                    reply = TensorDict({keys.HELD: torch.tensor(False), **self._totals()})
                else:
                    batch = self.store.sample(n)
                    leaf = self.sampler.tree[batch[keys.REPLAY_INDEX]]
                    reply = TensorDict(
                        {
                            keys.HELD: torch.tensor(False),
                            keys.TRANSITIONS: batch.exclude(keys.PRIORITY_WEIGHT),
                            keys.SHARD_LEAF: leaf,
                            **self._totals(),
                        }
                    )
            self.sample_bytes += payload_nbytes(msg) + payload_nbytes(reply)
        return reply

    def _totals(self) -> dict:
        """The shard's priority mass, smallest ``p^alpha`` and size (every reply carries them)."""
        tree = self.sampler.tree
        return {
            keys.SHARD_TOTAL: tree.total.clone(),
            keys.SHARD_MIN_LEAF: tree.min.clone(),
            keys.SHARD_SIZE: torch.tensor(len(self.store)),
        }

    def _update_priorities(self, msg: TensorDict) -> TensorDict:
        self.watch.word()
        with self.lock:
            applied = self.store.update_priority(
                msg[keys.REPLAY_INDEX], msg[keys.REPLAY_GENERATION], msg[keys.PRIORITY]
            )
            self.counts["stale_priorities"] += msg[keys.PRIORITY].numel() - applied
        return TensorDict({keys.PRIORITIES_APPLIED: torch.tensor(applied)})

    def _replay_stats(self, _msg) -> TensorDict:
        """Counters and the priority distribution (quantiles of raw ``|delta|`` over up to 4096 items)."""
        self.watch.word()
        with self.lock:
            size = len(self.store)
            leaves = self.sampler.tree.sums[0][:size]
            if size > 4096:
                leaves = leaves[torch.randint(size, (4096,), generator=self._stats_rng)]
            a = self.replay
            raw = (leaves.pow(1.0 / a.alpha) - a.priority_eps) if size and a.alpha > 0 else leaves
            q = torch.quantile(raw.float(), torch.tensor([0.5, 0.9, 1.0])) if size else torch.zeros(3)
            return TensorDict(
                inserted=torch.tensor(self.store.inserted),
                insert_bytes=torch.tensor(self.inserts.bytes),
                insert_frames=torch.tensor(self.inserts.frames),
                sample_bytes=torch.tensor(self.sample_bytes),
                samples=torch.tensor(self.limiter.samples),
                priority_q=q,
                queued=torch.tensor(self.inbox.qsize()),
                store_bytes=torch.tensor(self.store.nbytes()),  # allocated: at capacity once written to
                **{k: torch.tensor(v) for k, v in self.counts.items()},
                **self._totals(),
            )

    def _replay_state(self, _msg) -> TensorDict:
        """Contents, tree, cursor, the sampler's RNG and counters as one byte tensor (a checkpoint of this shard)."""
        self.watch.word()
        with self.lock:
            self._drain()  # what was accepted is in the checkpoint
            state = {
                "store": self.store.state_dict(),
                "limiter": self.limiter.state_dict(),
                "counts": dict(self.counts),
            }
            buf = io.BytesIO()
            torch.save(state, buf)
        return TensorDict({keys.SHARD_STATE: torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)})

    def _load_replay_state(self, msg: TensorDict) -> TensorDict:
        self.watch.word()
        state = torch.load(io.BytesIO(msg[keys.SHARD_STATE].numpy().tobytes()), weights_only=True)
        with self.lock:
            self.store.inserted = 0  # whatever it held is replaced
            self._use_store("frame_ring" in state["store"])
            self.store.load_state_dict(state["store"])
            self.limiter.load_state_dict(state["limiter"])
            self.counts.update(state["counts"])
        print(f"[replay {self.ctx.rank}] restored {len(self.store):,} transitions", flush=True)
        return TensorDict({keys.SHARD_SIZE: torch.tensor(len(self.store))})

    def _replay_stop(self, msg: TensorDict) -> TensorDict:
        """The run is over: inserts answer ``stop`` from now on; with ``exit`` the loop ends too (the
        learner sends that after its final checkpoint, which reads this shard's contents)."""
        self.watch.word()
        self.stopped.set()
        if bool(msg[keys.SHARD_EXIT]):
            self.exit.set()
        return TensorDict({keys.SHARD_SIZE: torch.tensor(len(self.store))})

    # ---- the loop ---------------------------------------------------------------------------------
    @staticmethod
    def _items(msg: TensorDict) -> tuple | None:
        """An insert message's transitions and priorities (a packed window unpacked), and the frames
        of a frame-stack window; ``None`` if it is malformed."""
        if not is_packed(msg):
            return msg[keys.TRANSITIONS], msg.get(keys.PRIORITY, None)
        try:
            if is_frames(msg):
                frames, transitions, priority = unpack_frame_transitions(msg)
                return transitions, priority, frames
            return unpack_transitions(msg)
        except ValueError:
            return None

    def _use_store(self, frames: bool) -> None:
        """Frame-stack transitions go into a :class:`FrameReplayStore`, others into a plain one; an
        empty shard takes the kind its first insert (or a restored checkpoint) needs."""
        if isinstance(self.store, FrameReplayStore) != frames and self.store.inserted == 0:
            a = self.replay
            self.store = (
                FrameReplayStore(
                    a.capacity, None, sampler=self.sampler, frame_room=a.frame_room, generator=self.generator
                )
                if frames
                else ReplayStore(a.capacity, None, sampler=self.sampler, generator=self.generator)
            )

    def _write(self, items: tuple | None) -> bool:
        """Store one message's transitions (caller holds the lock); ``False`` if it was rejected."""
        if items is not None and not all_finite(items):
            self.counts["nonfinite"] += 1
            if self.counts["nonfinite"] <= 5:
                print(f"[replay {self.ctx.rank}] rejected an insert holding a NaN or inf", flush=True)
            return True  # said and counted here, not as a malformed one
        if items is not None:
            self._use_store(len(items) == 3)
        if items is None or not self.store.extend(*items):
            self.counts["rejected"] += 1
            return False
        return True

    def _drain(self) -> None:
        """Write every queued insert into the store (caller holds the lock)."""
        while True:
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                return
            self._write(self._items(msg))

    def run(self) -> None:
        self.watch.signals.install(cont=False)  # main thread only (a shard in a thread leaves them to its host)
        try:
            self._loop()
        finally:
            self.watch.signals.restore()

    def _loop(self) -> None:
        while not self.exit.is_set():
            if self.watch.wait_over():
                return
            try:
                msg = self.inbox.get(timeout=0.2)
            except queue.Empty:
                continue
            self.loops += 1
            faults.maybe_signal(self.ctx.rank, self.loops)  # a "step" of a shard: one insert message taken
            items = self._items(msg)  # unpacked outside the lock: samples go on meanwhile
            with self.lock:
                if not self._write(items):
                    if self.counts["rejected"] <= 5:
                        print(f"[replay {self.ctx.rank}] rejected a malformed insert", flush=True)
                self._drain()
