"""The SEED learner: rank 0 trains the one model that its inference server acts with.

Two threads share the model. The inference thread (:class:`InferenceServer`) answers the env
workers and assembles ``[B, T]`` chunks into a bounded queue; this role's loop takes
``algo.batch_size`` env trajectories per update and applies the IMPALA loss (V-trace) to them. Only the
optimizer step writes the parameters, so only it takes the shared lock: the learner's forward
and backward run while inference runs, and a batch is never served from half-updated weights.
There is no parameter copy anywhere, so the policy lag is the number of updates made while a
chunk was being collected and queued (a few at most, measured).

Observation statistics (:class:`distrl.nn.obs_norm.ObsNorm`: flat observations under the LSTM core,
or continuous actions) are merged here from every worker's data: each trained batch's observations
are folded in after the step that trained on them, under the same lock, so inference, which reads
this very model, sees them from its next batch on, and never a forward half-way through a merge.
"""

from __future__ import annotations

import collections
import queue
import threading
from typing import Optional

import torch
from tensordict import TensorDict

from distrl.algorithms.impala import impala_loss
from distrl.data import keys
from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic
from distrl.nn.recurrent import RecurrentActorCritic, UnrolledCore
from distrl.runtime import faults
from distrl.runtime.context import RoleContext
from distrl.recipes.seed.inference import InferenceServer
from distrl.roles.rows import RowQueue
from distrl.roles.learner import Learner


class SeedLearner(Learner):
    """Rank 0 of ``seed``: learner plus inference server, one process, one model."""

    def __init__(self, ctx: RoleContext):
        super().__init__(ctx)
        # All of SEED's compute is here (env workers only step envs), so this rank takes more
        # threads than run.torch_threads gives every process: with a 3x1024 net, 2 threads
        # trained 1.5x faster on 2 cores; with 2x64 it made no difference (docs/seed.md).
        torch.set_num_threads(max(self.cfg.run.torch_threads, self.algo.learner_threads))
        info = env_info(self.cfg.run.env)
        self.recurrent = self.algo.core == "lstm"
        # discrete ids: a categorical head; continuous ones: a Gaussian (and ObsNorm, net.obs_norm)
        state = self.setup(
            RecurrentActorCritic.for_env(info, self.cfg.net, self.algo.core_size)
            if self.recurrent
            else ActorCritic.for_env(info, self.cfg.net)
        )
        self.lock = threading.Lock()
        self.queue: queue.Queue = queue.Queue(maxsize=self.algo.queue_size)
        self.workers = ctx.ranks_of("env_worker")
        self._counted: collections.Counter = collections.Counter()
        self.rows = RowQueue()  # chunk rows not yet trained on
        self.server = InferenceServer(
            self.model,
            self.lock,
            lambda: self.session.tracker.updates,
            self.cfg,
            self.workers,
            info.shape,
            self.device,
            self.queue,
            is_lost=lambda rank: rank in ctx.transport.lost_peers(),
            stopping=self.session.stopping,
            obs_dtype=info.obs_dtype or torch.float32,
        )
        # the inference thread's sampling generator lives in this process: it travels in the checkpoint
        self.session.extra_state = lambda: {"inference_rng": self.server.generator.get_state()}
        saved = (state or {}).get("extra", {}).get("inference_rng")
        if saved is not None:
            self.server.generator.set_state(saved)
        ctx.transport.serve("hello", self.server.hello)
        ctx.transport.serve("infer", self.server.infer)
        needed = len(self.workers) * self.algo.groups_per_worker + 2
        if self.cfg.transport.num_threads < needed:  # degrades batching, never deadlocks: say it once
            print(
                f"[learner] transport.num_threads={self.cfg.transport.num_threads} < {needed} (env groups in "
                f"flight + 2): requests will queue in the transport and batches shrink",
                flush=True,
            )

    # ---- the loop --------------------------------------------------------------------------
    def next_batch(self) -> Optional[TensorDict]:
        """``algo.batch_size`` env trajectories: chunks are as wide as a request (wide requests keep
        the wire efficient), so they are cut into rows here, the rest kept for the next update."""
        tracker = self.session.tracker
        while len(self.rows) < self.algo.batch_size:
            try:
                chunk, returns = self.queue.get(timeout=0.2)
            except queue.Empty:
                if self.server.failure is not None:
                    raise RuntimeError("the inference thread failed") from self.server.failure
                if self.session.should_stop():
                    return None
                continue
            tracker.add_episodes(returns)
            self.rows.add(chunk)
        batch = self.rows.take(self.algo.batch_size)
        tracker.add_frames(batch[keys.TRAJ].numel())
        return batch.to(self.device, non_blocking=True)

    def update(self, batch: TensorDict) -> None:
        faults.maybe_signal(self.ctx.rank, self.tracker.updates)  # injected kill/stop/sigterm (reliability tests)
        traj = batch[keys.TRAJ]
        self.tracker.add_lag(self.tracker.updates - traj[keys.POLICY_VERSION])
        model = (
            UnrolledCore(self.model, batch[keys.CORE_STATE], traj[keys.DONE][..., 0]) if self.recurrent else self.model
        )
        out = impala_loss(model, traj, self.algo)
        # the lock: the step (and the statistics' fold) are the only writes to what inference reads
        grad_norm = self.apply_loss(out[keys.LOSS], lock=self.lock)
        if grad_norm is None:
            return
        counts = self.server.counts()  # they only grow: add what is new since the last update
        for name, n in (counts - self._counted).items():
            self.tracker.count(name, n)
        self._counted = counts
        self.learned(
            out,
            grad_norm,
            traj[keys.OBSERVATION],
            lock=self.lock,
            **{"learner/bytes_per_env_step": self.server.wire.bytes_per_env_step},
            **self.server.stats.window(),
        )

    def start(self) -> None:
        self.server.start()

    def wind_down(self) -> None:  # the final evaluation ran meanwhile: workers hear stop in their replies
        self.session.peers.await_peers(lambda: set(self.workers) - self.server.said_stop)

    def close(self) -> None:
        self.server.close()

    def summary_extra(self) -> dict:
        return {"bytes_per_env_step": round(self.server.wire.bytes_per_env_step, 2), **self.server.stats.summary()}

    def evaluate(self) -> list[float]:
        return self.session.greedy_returns(self._eval_policy(), head=self.model.head)  # a Gaussian plays its mean

    def _eval_policy(self):
        """``obs [B, F] -> out [B, head.width]`` (logits, or a Gaussian's mean and log-std); a recurrent
        core carries its state across calls, which is right for :func:`evaluate`: every env plays one
        episode from its reset, in lockstep."""
        if not self.recurrent:
            return lambda obs: self.model.policy(obs)
        state: dict[str, torch.Tensor] = {}

        def policy(obs: torch.Tensor) -> torch.Tensor:
            prev = state.get("core", self.model.initial_state(obs.shape[0], obs.device))
            out, _, state["core"] = self.model.step(obs, prev)
            return out

        return policy
