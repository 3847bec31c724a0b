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

Batching policy (:class:`DynamicBatcher`): the inference thread takes the oldest request, then
adds requests until the batch holds ``max_batch_envs`` observations or ``max_wait_ms`` has passed
since the first one *arrived* (so time spent queued behind a busy thread counts), taking whatever
is already queued at no wait. A request is never split; one that does not fit opens the next batch.
"""
from __future__ import annotations

import collections
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.data.wire import WireMeter, payload_nbytes
from distrl.models import sample_actions
from distrl.roles.seed_trajectory import GroupTrajectories

# Short names for the keys of a worker's step message and its reply (declared in distrl.data.keys).
OBS, ACTION = keys.OBSERVATION, keys.ACTION
REWARD, TERMINATED, TRUNCATED = keys.STEP_REWARD, keys.STEP_TERMINATED, keys.STEP_TRUNCATED
FINAL_OBS, RANK, GROUP, RUN_ID, STOP = keys.FINAL_OBSERVATION, keys.WORKER_RANK, keys.ENV_GROUP, keys.RUN_ID, keys.STOP


@dataclass(eq=False)
class Request:
    """One env group's step: the message's tensors, and the slot its reply is handed back in.

    ``obs [B, F]``, ``reward/terminated/truncated [B]`` (outcome of the group's previous step),
    ``final_obs [D, F]`` (true last observations of the ``D`` envs whose episode just ended).
    """

    key: tuple[int, int]  #: (worker rank, group index)
    run_id: int
    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor
    arrived: float = field(default_factory=time.monotonic)
    reply: Optional[TensorDict] = None
    error: Optional[BaseException] = None
    ready: threading.Event = field(default_factory=threading.Event)

    @property
    def size(self) -> int:
        return self.obs.shape[0]

    @classmethod
    def from_message(cls, td: TensorDict, num_envs: int, obs_dim: int) -> "Request":
        """Parse and check a worker's message; ``ValueError`` saying what is wrong."""
        names = (OBS, REWARD, TERMINATED, TRUNCATED, FINAL_OBS, RANK, GROUP, RUN_ID)
        missing = [k for k in names if k not in td.keys()]
        if missing:
            raise ValueError(f"step message misses {missing}")
        obs, final = td[OBS], td[FINAL_OBS]
        if obs.dtype != torch.float32 or tuple(obs.shape) != (num_envs, obs_dim):
            raise ValueError(f"observation {tuple(obs.shape)} {obs.dtype}, expected [{num_envs}, {obs_dim}] float32")
        done = td[TERMINATED] | td[TRUNCATED]
        if tuple(final.shape) != (int(done.sum()), obs_dim):
            raise ValueError(f"final_observation {tuple(final.shape)} for {int(done.sum())} episode ends")
        if not (torch.isfinite(obs).all() and torch.isfinite(final).all() and torch.isfinite(td[REWARD]).all()):
            raise ValueError("non-finite observation or reward")
        return cls((int(td[RANK]), int(td[GROUP])), int(td[RUN_ID]), obs, td[REWARD].float(), td[TERMINATED],
                   td[TRUNCATED], final)


class DynamicBatcher:
    """A bounded request queue and the batching policy of the module docstring."""

    def __init__(self, max_envs: int, max_wait_s: float, capacity: int):
        if max_envs < 1 or max_wait_s < 0 or capacity < 1:
            raise ValueError("max_envs and capacity must be >= 1, max_wait_s >= 0")
        self.max_envs, self.max_wait_s = max_envs, max_wait_s
        self._queue: queue.Queue = queue.Queue(maxsize=capacity)
        self._carry = None  # a request that did not fit the last batch: the next one starts with it

    def put(self, request) -> None:
        """Enqueue without waiting; ``queue.Full`` means more requests in flight than the bound."""
        self._queue.put_nowait(request)

    def next_batch(self, idle_timeout_s: float) -> list:
        """The next batch, oldest first; ``[]`` if nothing arrives within ``idle_timeout_s``."""
        first, self._carry = self._carry, None
        if first is None:
            try:
                first = self._queue.get(timeout=idle_timeout_s)
            except queue.Empty:
                return []
        batch, n = [first], first.size
        deadline = first.arrived + self.max_wait_s
        while n < self.max_envs:
            left = deadline - time.monotonic()
            try:
                req = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if n + req.size > self.max_envs:
                self._carry = req
                break
            batch.append(req)
            n += req.size
        return batch

    def drain(self) -> list:
        """Every request still waiting (to answer them at shutdown)."""
        out = [self._carry] if self._carry is not None else []
        self._carry = None
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out


class InferenceStats:
    """Batch fill, latency and forward time of served batches; thread-safe.

    ``window()`` gives the means since its last call (for metric rows), ``summary()`` the run's.
    Latency is a request's arrival at the handler to its reply being ready; compute is one batch's
    time on the inference thread up to its replies (fold outcomes, forward, sample, reply).
    """

    def __init__(self, keep: int = 10_000):
        self._lock = threading.Lock()
        self._totals = collections.Counter()
        self._window = collections.Counter()
        self._recent = collections.deque(maxlen=keep)  # latencies (s) for the p95

    def add_batch(self, requests: int, envs: int, latencies: list[float], compute_s: float) -> None:
        row = {"batches": 1, "requests": requests, "envs": envs, "latency_s": sum(latencies), "compute_s": compute_s}
        with self._lock:
            self._totals.update(row)
            self._window.update(row)
            self._recent.extend(latencies)

    @staticmethod
    def _means(c: collections.Counter) -> dict[str, float]:
        b, r = max(c["batches"], 1), max(c["requests"], 1)
        return {"batch_fill": c["requests"] / b, "batch_envs": c["envs"] / b,
                "latency_ms": 1e3 * c["latency_s"] / r, "compute_ms": 1e3 * c["compute_s"] / b}

    def window(self) -> dict[str, float]:
        """``inference/*`` means over the batches since the last call; ``{}`` if there were none."""
        with self._lock:
            c, self._window = self._window, collections.Counter()
        return {f"inference/{k}": v for k, v in self._means(c).items()} if c["batches"] else {}

    def summary(self) -> dict[str, float]:
        with self._lock:
            c, recent = self._totals.copy(), sorted(self._recent)
        out = {f"inference_{k}_mean": round(v, 4) for k, v in self._means(c).items()}
        out["inference_latency_ms_p95"] = round(1e3 * recent[int(0.95 * (len(recent) - 1))], 4) if recent else None
        out["inference_batches"] = c["batches"]
        return out


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

    def __init__(self, model: torch.nn.Module, lock: threading.Lock, version, cfg, worker_ranks: list[int],
                 obs_dim: int, device: torch.device, out: queue.Queue, is_lost=lambda rank: False):
        algo = cfg.algo
        self.model, self.lock, self.version, self.out, self.device = model, lock, version, out, device
        self.is_lost = is_lost
        self.algo, self.obs_dim, self.B = algo, obs_dim, algo.envs_per_group
        self.recurrent = algo.core == "lstm"
        self.batcher = DynamicBatcher(algo.max_batch_envs, algo.max_wait_ms / 1e3,
                                      capacity=max(1, len(worker_ranks)) * algo.groups_per_worker)
        shape = tuple(model.initial_state(1).shape[1:]) if self.recurrent else None
        self.groups = {(r, g): GroupTrajectories(self.B, obs_dim, algo.unroll_length, shape, device)
                       for r in worker_ranks for g in range(algo.groups_per_worker)}
        self.generator = torch.Generator(device).manual_seed(cfg.run.seed)
        self.stats, self.wire = InferenceStats(), WireMeter()
        self._counters = collections.Counter()  # dropped_chunks, rejected_requests: see counts()
        self._count_lock = threading.Lock()
        self.said_stop: set[int] = set()  # workers that got a stop reply
        self.run_ids: dict[int, int] = {}  # rank -> run id announced on hello
        self.failure: Optional[BaseException] = None
        self.stopping = threading.Event()  # from now on every request is answered with stop
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
            req = Request.from_message(td, self.B, self.obs_dim)
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
        self.wire.add(payload_nbytes(td) + payload_nbytes(req.reply), req.size)
        return req.reply

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
        # Fold in the last step's outcomes first: episode ends reset core states before this forward.
        chunks = [c for g, r in zip(groups, batch)
                  if (c := g.observe(r.run_id, r.obs, r.reward, r.terminated, r.truncated, r.final_obs)) is not None]
        sizes = [r.size for r in batch]
        obs = torch.cat([r.obs for r in batch]).to(self.device)
        with self.lock:
            version = self.version()
            if self.recurrent:
                logits, _, state = self.model.step(obs, torch.cat([g.core_state for g in groups]))
            else:
                logits, state = self.model.policy(obs), None
        action, log_prob = sample_actions(logits, self.generator)
        # int32 on the wire: half the bytes of int64, and every discrete space here fits
        for req, a in zip(batch, action.to("cpu", torch.int32).split(sizes)):
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
