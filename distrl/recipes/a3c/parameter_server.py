"""The parameter server: holds the parameters and the one optimizer every worker's gradient
goes through, applies gradients in arrival order (A3C) or one mean per round (A2C), and owns the
run as a :class:`~distrl.roles.learner.Learner`.

Handlers (on transport threads) only validate, enqueue with a bounded wait and reply with the
newest published parameters when the caller's are older; every gradient is applied in the
learner's loop (:meth:`~ParameterServer.next_batch`, :meth:`~ParameterServer.update`). Staleness,
the server's version when a gradient is applied minus the version it was computed from, is the
policy lag of this recipe: it goes to the tracker's lag statistics (one count per gradient) and to
``summary.json`` as ``staleness_*``. A gradient older than ``algo.max_staleness`` is dropped and
counted. The run's frames (``env_frames``, the rates, the stop rule) are those of the gradients
applied; a dropped gradient's go to ``frames_dropped``.

A2C (``algo.sync``): a round closes once every live worker has sent one gradient computed from
the current version; their mean is applied, and workers ask ``pull`` for the new version before
acting again. A worker declared lost leaves the live set, so a dead worker cannot stall a round.

Bytes on the wire (``bytes_per_env_step``): every push and pull with its reply, over the frames
the pushes carried. Gradients come and parameters go in ``algo.wire_dtype``; the parameters, the
optimizer and the applied (averaged, clipped) gradient stay float32 here.

Observation normalisation (a model with an ObsNorm: continuous control): the server sees no
observations, so each push carries the moments of the observations behind its gradient
(``obs_moments``); once that gradient is applied they are merged into ``model.obs_norm`` (Chan's
parallel merge: two workers' moments give the statistics of their observations together) and the
statistics, frozen parameters, reach every worker inside the next published vector. Their slots
in a gradient are ignored and the optimizer does not hold them. Keep ``algo.wire_dtype`` float32
then: bfloat16 would round the mean to 2^-8 of its size, a lot when the mean dwarfs the spread.
"""

from __future__ import annotations

import queue
import time
from typing import Optional

import torch
from tensordict import TensorDict
from torch import nn
from torch.nn.utils import parameters_to_vector

from distrl.data import keys
from distrl.data.wire import WireMeter, payload_nbytes
from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic
from distrl.runtime import faults
from distrl.runtime.context import RoleContext
from distrl.roles.board import ParameterBoard
from distrl.roles.learner import Learner

WAIT_S = 0.1  #: longest the loop waits for a gradient before it lets the session tick (liveness)


def make_optimizer(params, algo) -> torch.optim.Optimizer:
    """The server's optimizer: one state for all workers (the paper's shared-statistics RMSProp)."""
    if algo.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=algo.lr, alpha=algo.rmsprop_alpha, eps=algo.optim_eps)
    return torch.optim.Adam(params, lr=algo.lr, eps=algo.optim_eps)


class WireBoard(ParameterBoard):
    """The flat :class:`ParameterBoard`, its snapshot in the wire's dtype (cast once per update,
    not once per reply)."""

    def __init__(self, model: nn.Module, dtype: torch.dtype):
        super().__init__(model, flat=True)
        self.dtype = dtype

    def publish(self, version: int) -> None:
        params = parameters_to_vector(self.model.parameters()).detach().to("cpu", self.dtype, copy=True)
        self.published = (version, params)  # one attribute write: readers see old or new


class ParameterServer(Learner):
    """Rank 0 of ``a3c``; see the module docstring."""

    def __init__(self, ctx: RoleContext):
        super().__init__(ctx)
        model = ActorCritic.for_env(env_info(self.cfg.run.env), self.cfg.net).to(self.device)
        self.setup(model, make_optimizer([p for p in model.parameters() if p.requires_grad], self.algo))
        self.params = list(self.model.parameters())  # the flat vector's layout, frozen statistics included
        self.num_params = sum(p.numel() for p in self.params)
        norm = self.model.obs_norm
        #: the shape of a push's obs_moments ([1 + 2F]), None without observation normalisation
        self.moments_shape = None if norm is None else (1 + 2 * norm.mean.numel(),)
        self.workers = set(ctx.ranks_of("worker"))
        if self.algo.sync and self.algo.queue_size < len(self.workers):
            # a dropped gradient would leave its round waiting for a worker that is alive
            raise ValueError(f"algo.sync needs algo.queue_size >= the {len(self.workers)} workers")
        self.queue: queue.Queue = queue.Queue(maxsize=self.algo.queue_size)
        self.round: dict[int, TensorDict] = {}  # A2C: this version's gradient of each worker so far
        self.stopping = self.session.stopping
        self.wire_dtype = getattr(torch, self.algo.wire_dtype)
        self.board = WireBoard(self.model, self.wire_dtype)  # workers load it with vector_to_parameters
        self.said_stop: set[int] = set()
        self.env_errors: dict[int, int] = {}  # each worker's env failures so far (distrl/roles/env_recovery.py)
        self.wire = WireMeter()
        self.publish()
        ctx.transport.serve("pull", self._pull)
        ctx.transport.serve("push", self._push)

    @property
    def version(self) -> int:
        return self.tracker.updates

    # ---- handlers (transport threads: never block long, never call out) -------------------
    def _reply(self, rank: int, their_version: int) -> TensorDict:
        stop = self.stopping.is_set() or rank in self.ctx.transport.lost_peers()
        if stop:
            self.said_stop.add(rank)
        return self.board.reply(their_version, stop)

    def _pull(self, td: TensorDict) -> TensorDict:
        reply = self._reply(int(td[keys.WORKER_RANK]), int(td[keys.POLICY_VERSION]))
        self.wire.add(payload_nbytes(td) + payload_nbytes(reply), 0)  # A2C's parameters come this way
        return reply

    def _push(self, msg: TensorDict) -> TensorDict:
        rank = int(msg[keys.WORKER_RANK])
        if not (self.stopping.is_set() or rank in self.ctx.transport.lost_peers()):
            # a lost rank (stopped, then woken) is told to stop and its late gradient ignored
            self.env_errors[rank] = int(msg.get(keys.ENV_ERRORS, 0))  # each worker's running count
            if any(self.env_errors.values()):
                self.tracker.set_count("env_errors", sum(self.env_errors.values()))
            grad = msg[keys.GRADIENT]
            moments = msg.get(keys.OBS_MOMENTS, None)
            if grad.shape != (self.num_params,) or grad.dtype != self.wire_dtype:
                self._reject(
                    rank, f"gradient {tuple(grad.shape)} {grad.dtype}, expected [{self.num_params}] {self.wire_dtype}"
                )
            elif (None if moments is None else tuple(moments.shape)) != self.moments_shape:
                self._reject(
                    rank,
                    f"obs_moments {None if moments is None else tuple(moments.shape)}, expected {self.moments_shape}",
                )
            else:
                try:
                    self.queue.put(msg, timeout=self.algo.put_timeout_s)
                except queue.Full:
                    self.tracker.count("dropped_gradients_queue_full")
        reply = self._reply(rank, int(msg[keys.POLICY_VERSION]))
        self.wire.add(payload_nbytes(msg) + payload_nbytes(reply), int(msg[keys.FRAMES]))
        return reply

    def _reject(self, rank: int, problem: str) -> None:
        if self.tracker.count("rejected_gradients") <= 5:
            print(f"[parameter_server] rejected a gradient from rank {rank}: {problem}", flush=True)

    # ---- the loop: gradients off the queue, their mean applied, the new version published -----
    def _take(self, timeout: float) -> Optional[TensorDict]:
        """One gradient off the queue (its episodes counted; its frames once it is applied), or
        ``None`` after ``timeout``."""
        try:
            msg = self.queue.get(timeout=timeout)
        except queue.Empty:
            return None
        self.tracker.add_episodes(msg[keys.EPISODE_RETURNS].tolist())
        self.tracker.observe({f"worker/{k}": float(v) for k, v in msg[keys.WORKER_STATS].items()})
        return msg

    def next_batch(self) -> Optional[list[TensorDict]]:
        """A3C: the next gradient to arrive. A2C: the round's gradients once every live worker has
        sent one. ``None`` when nothing is ready within :data:`WAIT_S` (the session then ticks)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            msg = self._take(max(0.0, deadline - time.monotonic()))
            if not self.algo.sync:
                return None if msg is None else [msg]
            if msg is not None:
                if int(msg[keys.POLICY_VERSION]) == self.version:
                    self.round[int(msg[keys.WORKER_RANK])] = msg
                else:  # cannot happen with live workers (they wait for each version): count it
                    self._drop(msg)
            live = self.workers - self.ctx.transport.lost_peers()
            if self.round and live <= self.round.keys():
                batch, self.round = list(self.round.values()), {}
                return batch
            if msg is None:
                return None

    def _drop(self, msg: TensorDict) -> None:
        self.tracker.count("dropped_stale_gradients")
        self.tracker.drop_frames(int(msg[keys.FRAMES]))

    def update(self, msgs: list[TensorDict]) -> None:
        """Apply the mean of the gradients in ``msgs`` that are not too stale; count the others.
        The frames counted are the applied gradients' (what the update trained on).

        The policy and value towers are clipped apart (:func:`distrl.nn.models.clip_towers`), as the
        impala learner does: under one global clip the value gradient sets the norm.

        With observation normalisation the applied gradients' ``obs_moments`` are merged into
        ``model.obs_norm`` after the step (the step trained on the statistics the workers acted
        with), before the new version is published."""
        tracker = self.tracker
        faults.maybe_signal(self.ctx.rank, tracker.updates)  # injected kill/stop/sigterm (reliability tests)
        cap = self.algo.max_staleness
        kept, staleness, frames, moments = [], [], 0, []
        for m in msgs:
            s = self.version - int(m[keys.POLICY_VERSION])
            if cap is not None and s > cap:
                self._drop(m)
                continue
            kept.append(m[keys.GRADIENT].to(self.device, torch.float32))  # widened before the mean
            staleness.append(s)
            frames += int(m[keys.FRAMES])
            if self.moments_shape is not None:
                moments.append(m[keys.OBS_MOMENTS])
        if not kept:
            return
        grad = torch.stack(kept).mean(0) if len(kept) > 1 else kept[0]
        offset = 0
        for p in self.params:
            if p.requires_grad:  # a frozen statistic's slot is ignored: it keeps no .grad
                p.grad = grad[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        grad_norm = self.apply_loss(None)  # the gradients are in .grad
        if grad_norm is None:
            return
        if moments:
            self.model.obs_norm.update_moments(torch.stack(moments).sum(0))
        tracker.add_frames(frames)
        self.publish()
        tracker.add_lag(torch.tensor(staleness))
        tracker.observe(
            {
                "parameter_server/grad_norm": float(grad_norm),
                "parameter_server/staleness": sum(staleness) / len(staleness),
                "parameter_server/bytes_per_env_step": self.wire.bytes_per_env_step,
            }
        )

    def publish(self) -> None:
        self.board.publish(self.version)

    def wind_down(self) -> None:
        self.session.peers.await_peers(lambda: self.workers - self.said_stop, drain=self.queue)

    def summary_extra(self) -> dict:
        """``summary.json``'s A3C figures: staleness of the applied gradients, drops, update rate."""
        t = self.tracker
        return {
            "staleness_mean": round(t.lag_mean, 4),
            "staleness_max": t.lag_max,
            "staleness_hist": {str(k): v for k, v in sorted(t.lag_hist.items())},
            "gradients_applied": t.lag_count,
            "dropped_stale_gradients": t.counters["dropped_stale_gradients"],
            "updates_per_s": round(t.updates / max(t.wall_s, 1e-9), 2),
            "sync": self.algo.sync,
            "bytes_per_env_step": round(self.wire.bytes_per_env_step, 2),
        }
