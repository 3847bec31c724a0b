"""Dynamic batching of inference requests, shared by SEED's inference server and Sample Factory's
policy worker: a worker's step message parsed into a :class:`Request` (SEED's wire format), the
dynamic batcher that groups requests for one forward, and the statistics of served batches.

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
from typing import Callable, Optional

import torch
from tensordict import TensorDict

from distrl.data import keys

# Short names for the keys of a worker's step message and its reply (declared in distrl.data.keys).
OBS, ACTION = keys.OBSERVATION, keys.ACTION
REWARD, TERMINATED, TRUNCATED = keys.STEP_REWARD, keys.STEP_TERMINATED, keys.STEP_TRUNCATED
FINAL_OBS, RANK, GROUP, RUN_ID, STOP = keys.FINAL_OBSERVATION, keys.WORKER_RANK, keys.ENV_GROUP, keys.RUN_ID, keys.STOP


@dataclass(eq=False)
class Request:
    """One env group's step: the message's tensors, and the slot its reply is handed back in.

    ``obs [B, *F]``, ``reward/terminated/truncated [B]`` (outcome of the group's previous step),
    ``final_obs [D, *F]`` (true last observations of the ``D`` envs whose episode just ended).
    Observations are float32 vectors or images in their own dtype (uint8, bool).
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
    def from_message(
        cls, td: TensorDict, num_envs: int, obs_shape: int | tuple[int, ...], obs_dtype: torch.dtype = torch.float32
    ) -> "Request":
        """Parse and check a worker's message against ``obs [num_envs, *obs_shape]`` of ``obs_dtype``
        (an int ``F`` means ``(F,)``); ``ValueError`` saying what is wrong."""
        shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        names = (OBS, REWARD, TERMINATED, TRUNCATED, FINAL_OBS, RANK, GROUP, RUN_ID)
        missing = [k for k in names if k not in td.keys()]
        if missing:
            raise ValueError(f"step message misses {missing}")
        obs, final = td[OBS], td[FINAL_OBS]
        if obs.dtype != obs_dtype or tuple(obs.shape) != (num_envs, *shape):
            want = ", ".join(map(str, (num_envs, *shape)))
            raise ValueError(f"observation {tuple(obs.shape)} {obs.dtype}, expected [{want}] {obs_dtype}")
        done = td[TERMINATED] | td[TRUNCATED]
        if tuple(final.shape) != (int(done.sum()), *shape) or final.dtype != obs_dtype:
            raise ValueError(f"final_observation {tuple(final.shape)} {final.dtype} for {int(done.sum())} episode ends")
        finite = not obs.is_floating_point() or (torch.isfinite(obs).all() and torch.isfinite(final).all())
        if not (finite and torch.isfinite(td[REWARD]).all()):
            raise ValueError("non-finite observation or reward")
        return cls(
            (int(td[RANK]), int(td[GROUP])),
            int(td[RUN_ID]),
            obs,
            td[REWARD].float(),
            td[TERMINATED],
            td[TRUNCATED],
            final,
        )


class DynamicBatcher:
    """A bounded request queue and the batching policy of the module docstring.

    Requests reach the queue by :meth:`put` from other threads (SEED's rpc handlers), or, given
    ``pull``, from the batching thread itself: ``pull(timeout_s)`` waits up to ``timeout_s`` for
    requests and ``put``s what came. ``sf``'s inference pulls its doorbell this way, so no
    listening thread hands each request over (a thread wake-up and a GIL hand-off per request).
    """

    def __init__(self, max_envs: int, max_wait_s: float, capacity: int, pull: Optional[Callable[[float], None]] = None):
        if max_envs < 1 or max_wait_s < 0 or capacity < 1:
            raise ValueError("max_envs and capacity must be >= 1, max_wait_s >= 0")
        self.max_envs, self.max_wait_s, self._pull = max_envs, max_wait_s, pull
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
                first = self._get(idle_timeout_s)
            except queue.Empty:
                return []
        batch, n = [first], first.size
        deadline = first.arrived + self.max_wait_s
        while n < self.max_envs:
            try:
                req = self._get(deadline - time.monotonic())
            except queue.Empty:
                break
            if n + req.size > self.max_envs:
                self._carry = req
                break
            batch.append(req)
            n += req.size
        return batch

    def _get(self, timeout_s: float):
        """The oldest request, waiting up to ``timeout_s`` (none if not positive); ``queue.Empty``."""
        if self._pull is None:
            return self._queue.get(timeout=timeout_s) if timeout_s > 0 else self._queue.get_nowait()
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            self._pull(max(timeout_s, 0.0))
            return self._queue.get_nowait()

    def drain(self) -> list:
        """Every request still waiting (to answer them at shutdown), pulled ones included."""
        if self._pull is not None:
            self._pull(0.0)
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
        return {
            "batch_fill": c["requests"] / b,
            "batch_envs": c["envs"] / b,
            "latency_ms": 1e3 * c["latency_s"] / r,
            "compute_ms": 1e3 * c["compute_s"] / b,
        }

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
