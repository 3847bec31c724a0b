"""SEED's inference server: dynamic batching of every worker's requests on the learner's model.

Threads. The transport's handler interface is synchronous (``handler(td) -> td``), so a request
handler enqueues its request and waits on the request's own ``threading.Event`` until the
inference thread has answered it, bounded by ``algo.request_timeout_s``. It never calls out and
never waits on another call, so it cannot deadlock the transport; it only holds a transport
thread for one batch's latency. Each env group has at most one request in flight (the worker
sends a group's next step only after its reply), so at most ``workers * groups_per_worker``
handlers wait at once, and each request carries a whole group of envs. The transport needs that
many threads plus two (``ping``, ``hello``); with fewer, requests queue inside the transport and
batches get smaller, but nothing blocks for good (the inference thread needs no transport thread).

The batching policy and the request parsing are in :mod:`distrl.roles.batcher`.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Optional

import torch
from tensordict import TensorDict

from distrl.data.frame_stream import FRAME, KEYS as STREAM_KEYS, StackReceiver
from distrl.data.wire import WireMeter, payload_nbytes
from distrl.roles.batcher import (
    ACTION,
    FINAL_OBS,
    GROUP,
    OBS,
    RANK,
    RUN_ID,
    STOP,
    TERMINATED,
    TRUNCATED,
    DynamicBatcher,
    InferenceStats,
    Request,
)
from distrl.data.unrolls import GroupTrajectories


class InferenceServer:
    """Serves ``hello`` and ``infer`` for every env worker from one shared model.

    Args:
        model: the learner's own model (``ActorCritic``, or ``RecurrentActorCritic`` for a
            recurrent core); never copied.
        lock: held around each forward here and around each optimizer step in the learner, so a
            batch never sees half-updated parameters; ``version()`` is read under it.
        out: the learner's bounded chunk queue; items are ``(chunk [B], episode returns)``.
        is_lost: whether a rank was declared lost (its requests are then answered with stop).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        lock: threading.Lock,
        version,
        cfg,
        worker_ranks: list[int],
        obs_shape: int | tuple[int, ...],
        device: torch.device,
        out: queue.Queue,
        is_lost=lambda rank: False,
        stopping: Optional[threading.Event] = None,
        obs_dtype: torch.dtype = torch.float32,
    ):
        algo = cfg.algo
        self.model, self.lock, self.version, self.out, self.device = model, lock, version, out, device
        self.is_lost = is_lost
        self.algo, self.obs_shape, self.obs_dtype, self.B = algo, obs_shape, obs_dtype, algo.envs_per_group
        self.recurrent = algo.core == "lstm"
        self.batcher = DynamicBatcher(
            algo.max_batch_envs, algo.max_wait_ms / 1e3, capacity=max(1, len(worker_ranks)) * algo.groups_per_worker
        )
        shape = tuple(model.initial_state(1).shape[1:]) if self.recurrent else None
        head = self.head = model.head  # how the policy's output becomes actions (distrl/nn/heads.py)
        self.groups = {
            (r, g): GroupTrajectories(
                self.B, obs_shape, algo.unroll_length, shape, device, obs_dtype, head.action_shape, head.action_dtype
            )
            for r in worker_ranks
            for g in range(algo.groups_per_worker)
        }
        # int32 on the wire for discrete actions: half the bytes of int64, and every discrete space
        # here fits; a Gaussian's float32 [B, A] as sampled (the env clips it: distrl/nn/heads.py)
        self.wire_dtype = torch.float32 if head.continuous else torch.int32
        self.generator = torch.Generator(device).manual_seed(cfg.run.seed)
        self.stats, self.wire = InferenceStats(), WireMeter()
        self._counters = collections.Counter()  # dropped_chunks, rejected_requests: see counts()
        self._count_lock = threading.Lock()
        self.said_stop: set[int] = set()  # workers that got a stop reply
        self.run_ids: dict[int, int] = {}  # rank -> run id announced on hello
        #: (rank, group) -> (run id, StackReceiver): frame stacks rebuilt from their new frames
        self.streams: dict[tuple[int, int], tuple[int, StackReceiver]] = {}
        self.failure: Optional[BaseException] = None
        #: set: every request from now on is answered with stop (the learner passes its session's)
        self.stopping = stopping if stopping is not None else threading.Event()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="distrl-seed-inference", daemon=True)

    # ---- handlers (transport threads: enqueue, then a bounded wait on the request's own event) --
    def hello(self, td: TensorDict) -> TensorDict:
        rank, run_id = int(td[RANK]), int(td[RUN_ID])
        if self.run_ids.get(rank, run_id) != run_id:
            print(f"[inference] env worker {rank} restarted (run id {run_id}): its envs' state is reset", flush=True)
        self.run_ids[rank] = run_id  # its groups are reset when the first step of that run arrives
        if self.stopping.is_set():
            self.said_stop.add(rank)
        return TensorDict({STOP: torch.tensor(self.stopping.is_set())})

    def infer(self, td: TensorDict) -> TensorDict:
        rank = int(td[RANK])
        if self.stopping.is_set() or self.is_lost(rank):
            # a rank declared lost that comes back (it was stopped) is told to stop, not mixed in
            self.said_stop.add(rank)
            return TensorDict({STOP: torch.tensor(True)})
        try:
            wire_bytes = payload_nbytes(td)
            if FRAME in td.keys():  # frame stacks sent a new frame at a time: rebuild them
                td = self._stacks(td)
            req = Request.from_message(td, self.B, self.obs_shape, self.obs_dtype)
            if req.key not in self.groups:
                raise ValueError(f"no env group {req.key} on this server")
            self.batcher.put(req)
        except (ValueError, queue.Full) as e:
            self._count("rejected_requests")
            raise ValueError(f"request rejected: {str(e) or 'more requests in flight than env groups'}") from None
        if not req.ready.wait(self.algo.request_timeout_s):
            raise TimeoutError(f"no inference reply within algo.request_timeout_s={self.algo.request_timeout_s}s")
        if req.error is not None:
            raise RuntimeError(f"inference failed: {req.error!r}")
        if bool(req.reply[STOP]):
            self.said_stop.add(rank)
        self.wire.add(wire_bytes + payload_nbytes(req.reply), req.size)
        return req.reply

    def _stacks(self, td: TensorDict) -> TensorDict:
        """``td`` with ``observation`` and ``final_observation`` rebuilt from its frames (its group's
        :class:`StackReceiver`, started over when the group's run id changes)."""
        key, run_id = (int(td[RANK]), int(td[GROUP])), int(td[RUN_ID])
        if self.streams.get(key, (None,))[0] != run_id:
            self.streams[key] = (run_id, StackReceiver())
        obs, final = self.streams[key][1].decode(td, td[TERMINATED] | td[TRUNCATED])
        return td.exclude(*STREAM_KEYS).update({OBS: obs, FINAL_OBS: final})

    def _count(self, name: str) -> None:
        with self._count_lock:  # handler threads and the inference thread both count
            self._counters[name] += 1

    def counts(self) -> collections.Counter:
        """A copy of the server's event counters (they only grow)."""
        with self._count_lock:
            return self._counters.copy()

    # ---- the inference thread ---------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Answer every request from now on with ``stop`` (the thread keeps draining)."""
        self.stopping.set()

    def close(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self._halt.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        with torch.no_grad():
            while not self._halt.is_set():
                batch = self.batcher.next_batch(idle_timeout_s=0.05)
                if self.stopping.is_set():
                    batch += self.batcher.drain()
                    self._answer(batch, TensorDict({STOP: torch.tensor(True)}))
                elif batch:
                    try:
                        self._serve(batch)
                    except Exception as e:  # a bug here must reach the learner, not hang the workers
                        self.failure = e
                        self._answer(batch, None, e)
                        self.stopping.set()
            self._answer(self.batcher.drain(), TensorDict({STOP: torch.tensor(True)}))

    @staticmethod
    def _answer(batch: list[Request], reply: Optional[TensorDict], error: Optional[BaseException] = None) -> None:
        for req in batch:
            if not req.ready.is_set():
                req.reply, req.error = reply, error
                req.ready.set()

    def _serve(self, batch: list[Request]) -> None:
        start = time.monotonic()
        groups = [self.groups[r.key] for r in batch]
        for g, r in zip(groups, batch):  # a group restarted under a run id of its own: its env failed
            if g.run_id is not None and r.run_id not in (g.run_id, self.run_ids.get(r.key[0])):
                self._count("env_errors")
        # Fold in the last step's outcomes first: episode ends reset core states before this forward.
        chunks = [
            c
            for g, r in zip(groups, batch)
            if (c := g.observe(r.run_id, r.obs, r.reward, r.terminated, r.truncated, r.final_obs)) is not None
        ]
        sizes = [r.size for r in batch]
        obs = torch.cat([r.obs for r in batch]).to(self.device)
        with self.lock:
            version = self.version()
            if self.recurrent:
                out, _, state = self.model.step(obs, torch.cat([g.core_state for g in groups]))
            else:
                out, state = self.model.policy(obs), None
        action, log_prob = self.head.sample(out, self.generator)  # [N] int64 or [N, A] float32, [N]
        for req, a in zip(batch, action.to("cpu", self.wire_dtype).split(sizes)):
            req.reply = TensorDict({ACTION: a, STOP: torch.tensor(False)})
            req.ready.set()
        done = time.monotonic()
        # Book-keeping after the replies: the workers are already stepping their envs.
        states = state.split(sizes) if state is not None else [None] * len(batch)
        for g, o, a, lp, s in zip(groups, obs.split(sizes), action.split(sizes), log_prob.split(sizes), states):
            g.act(o, a, lp, version, s)
        self.stats.add_batch(len(batch), sum(sizes), [done - r.arrived for r in batch], done - start)
        deadline = time.monotonic() + self.algo.put_timeout_s  # one bound for the whole batch
        for chunk in chunks:
            self._emit(chunk, deadline)

    def _emit(self, chunk: tuple[TensorDict, list[float]], deadline: float) -> None:
        """Hand a chunk to the learner; a full queue holds this thread (and so the workers: that is
        the backpressure) until ``deadline``, then the chunk is dropped."""
        while not self.stopping.is_set():
            try:
                self.out.put(chunk, timeout=0.05)
                return
            except queue.Full:
                if time.monotonic() > deadline:
                    self._count("dropped_chunks")
                    return
