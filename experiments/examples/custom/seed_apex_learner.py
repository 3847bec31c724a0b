"""seed_apex's rank 0: SEED's inference server acting epsilon-greedily on the learner's Q-network,
a writer thread turning the server's n-step windows into prioritized inserts, and Ape-X's learner.

Four kinds of thread share the one process and the one Q-network:

- transport handlers (``hello``, ``infer``): SEED's :class:`InferenceServer`, unchanged (enqueue,
  bounded wait for the reply);
- the inference thread: batches the env workers' requests, one forward under the lock, each env
  acting at its own rung of the epsilon ladder (:class:`EpsilonGreedyServer`), and cuts every
  group's n-step windows (:class:`~distrl.roles.nstep.NStepTrajectories`) into a queue of
  ``algo.queue_size``;
- the writer (:class:`TransitionWriter`): window -> n-step returns and initial priorities (one
  forward) -> an insert into the replay shards (``Inserter``, the Ape-X actors' protocol). The
  shards' rate limiter holds the writer, the full queue then holds the inference thread, and that
  holds the env workers: the replay's pace reaches back to the envs;
- the learner loop: Ape-X's sampling and double-DQN steps, inherited from :class:`ApexLearner`
  (whose loop is :class:`distrl.roles.learner.Learner`'s).

The optimizer step holds the lock that inference holds around its forward (hooks on the
optimizer), so a batch is never served from half-updated parameters; no parameter is copied.
"""

from __future__ import annotations

import collections
import queue
import threading
from typing import Optional

import torch

from distrl.data import keys
from distrl.envs.gym import env_info
from distrl.nn.models import QNetwork
from distrl.recipes.apex.learner import ApexLearner
from distrl.runtime.context import RoleContext
from distrl.recipes.seed.inference import InferenceServer
from distrl.replay.inserter import Inserter
from distrl.roles.epsilon_greedy import EpsilonGreedyHead, QPolicy, env_ladder
from distrl.roles.nstep import NStepTrajectories, ended_envs, nstep_insert


class EpsilonGreedyServer(InferenceServer):
    """SEED's server acting on ``QPolicy(model)``; each env explores at its rung of the ladder over
    every env of every worker (:func:`env_ladder`), and the groups cut n-step windows."""

    def __init__(self, model: QNetwork, lock: threading.Lock, version, cfg, workers: list[int], device, out, **kw):
        info, algo = env_info(cfg.run.env), cfg.algo
        obs_dtype = info.obs_dtype or torch.float32
        super().__init__(
            QPolicy(model, EpsilonGreedyHead(info.num_actions)),
            lock,
            version,
            cfg,
            workers,
            info.shape,
            device,
            out,
            obs_dtype=obs_dtype,
            **kw,
        )
        ladder = env_ladder(sorted(self.groups), self.B, algo.eps_base, algo.eps_alpha)
        self.groups = {
            key: NStepTrajectories(
                self.B, info.shape, algo.unroll_length, None, device, obs_dtype, n_step=algo.n_step, epsilon=ladder[key]
            )
            for key in self.groups
        }

    def _serve(self, batch) -> None:
        self.head.epsilon = torch.cat([self.groups[r.key].epsilon for r in batch]).to(self.device)
        super()._serve(batch)


class TransitionWriter:
    """The thread between the server's windows and the replay shards (module docstring). Its counts
    wait in :meth:`take_stats` for the learner loop, which alone touches the tracker."""

    def __init__(self, ctx: RoleContext, model: QNetwork, lock: threading.Lock, windows: queue.Queue):
        self.cfg, self.algo, self.model, self.lock, self.windows = ctx.cfg, ctx.cfg.algo, model, lock, windows
        self.device = next(model.parameters()).device
        self.inserter = Inserter(
            ctx.transport, ctx.ranks_of("replay"), ctx.cfg.transport.call_timeout_s, self.algo.hold_sleep_s, paced=True
        )
        self.frames = env_info(self.cfg.run.env).frame_stack > 0
        self.failure: Optional[BaseException] = None
        self._stats_lock = threading.Lock()
        self._stats = self._empty()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="distrl-seed-apex-writer", daemon=True)

    @staticmethod
    def _empty() -> dict:
        return {"frames": 0, "returns": [], "explore_returns": [], "versions": []}

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._halt.set()
        self._thread.join(timeout)

    def take_stats(self) -> dict:
        """What was inserted since the last call: frames, episode returns (of envs exploring at most
        ``algo.report_max_eps``, and of the others), the policy versions of the new steps."""
        with self._stats_lock:
            out, self._stats = self._stats, self._empty()
        return out

    def _loop(self) -> None:
        try:
            while not self._halt.is_set():
                try:
                    chunk, returns = self.windows.get(timeout=0.05)
                except queue.Empty:
                    continue
                if not self._write(chunk, returns):
                    return
        except Exception as e:  # a bug here must reach the learner loop, not leave the replay empty
            self.failure = e

    def _write(self, chunk, returns: list[float]) -> bool:
        """Insert one window; ``False`` once the replay service stopped or every shard is gone."""
        window, T = chunk[keys.TRAJ].cpu(), self.algo.unroll_length  # inserts leave from the CPU (rpc)
        with torch.no_grad(), self.lock:
            msg = nstep_insert(
                window,
                lambda obs: self.model(obs.to(self.device)).cpu(),
                self.algo.gamma,
                self.algo.n_step,
                self.frames,
            )
        eps = chunk[keys.EPSILON].cpu()[ended_envs(window, T)].tolist()
        with self._stats_lock:
            s = self._stats
            s["frames"] += window[:, -T:].numel()
            s["versions"].append(window[keys.POLICY_VERSION][:, -T:].reshape(-1))
            for ret, e in zip(returns, eps):
                s["returns" if e <= self.algo.report_max_eps else "explore_returns"].append(ret)
        settled = self.inserter.settle()  # the previous window, held back by the rate limiter if it must
        if settled != Inserter.TAKEN:
            return False
        self.inserter.next_shard()  # windows go round robin over the shards
        self.inserter.send(msg)
        return True


class SeedApexLearner(ApexLearner):
    """Rank 0 of ``seed_apex``: Ape-X's learner (its Q-networks, replay client and loop), fed by a
    SEED server instead of actors: :meth:`serve` builds the server and the writer in place of the
    actors' handlers, and the other hooks start, stop and report them."""

    def serve(self, ctx: RoleContext) -> None:
        # The optimizer step is the one write to the parameters inference and the writer read: it
        # takes the lock their forwards hold (a step pre-hook must return None, hence "and None").
        self.lock = threading.Lock()
        self.optim.register_step_pre_hook(lambda *_: self.lock.acquire() and None)
        self.optim.register_step_post_hook(lambda *_: self.lock.release())
        self.workers = ctx.ranks_of("env_worker")
        windows: queue.Queue = queue.Queue(maxsize=self.algo.queue_size)
        self.server = EpsilonGreedyServer(
            self.model,
            self.lock,
            lambda: self.tracker.updates,
            self.cfg,
            self.workers,
            self.device,
            windows,
            stopping=self.session.stopping,
            is_lost=lambda rank: rank in ctx.transport.lost_peers(),
        )
        self.writer = TransitionWriter(ctx, self.model, self.lock, windows)
        self._counted: collections.Counter = collections.Counter()
        self._explore = collections.deque(maxlen=100)  # returns of envs exploring more than report_max_eps
        ctx.transport.serve("hello", self.server.hello)
        ctx.transport.serve("infer", self.server.infer)

    def start(self) -> None:
        super().start()  # the replay shards' checkpointed contents, on --resume
        self.server.start()
        self.writer.start()

    def publish(self) -> None:
        """Nothing: inference reads the learner's own model (under the lock), no one pulls parameters."""

    def _fold_actor_stats(self) -> None:
        """The writer's and the server's counts into the tracker (ApexLearner's ``next_batch`` calls it)."""
        if self.writer.failure is not None:
            raise RuntimeError("the transition writer failed") from self.writer.failure
        tracker, s = self.tracker, self.writer.take_stats()
        tracker.add_frames(s["frames"])
        tracker.add_episodes(s["returns"])
        self._explore.extend(s["explore_returns"])
        for versions in s["versions"]:
            tracker.add_lag(tracker.updates - versions)
        counts = self.server.counts()  # they only grow: add what is new
        for name, n in (counts - self._counted).items():
            tracker.count(name, n)
        self._counted = counts
        metrics = self.replay.poll_stats() | self.server.stats.window()
        metrics["learner/bytes_per_env_step"] = self.wire_bytes()["bytes_per_env_step"]
        if self._explore:
            metrics["env_worker/return_exploring"] = sum(self._explore) / len(self._explore)
        tracker.observe(metrics)

    def wire_bytes(self) -> dict[str, float]:
        """Per env step: the env workers' requests and replies (``inference_bytes_per_env_step``) and
        the inserts into the shards (``insert_bytes_per_env_step``), their sum ``bytes_per_env_step``;
        beside it, not in it, what the learner samples (``sample_bytes_per_env_step``)."""
        inserted, frames, sampled = self.replay.wire_totals()
        infer, insert = self.server.wire.bytes_per_env_step, inserted / frames if frames else 0.0
        return {
            "bytes_per_env_step": infer + insert,
            "inference_bytes_per_env_step": infer,
            "insert_bytes_per_env_step": insert,
            "sample_bytes_per_env_step": sampled / frames if frames else 0.0,
        }

    def wind_down(self) -> None:
        # the writer heard stop from its shard (ApexLearner.stopped), the env workers hear it in replies
        self.session.peers.await_peers(lambda: set(self.workers) - self.server.said_stop)

    def close(self) -> None:
        self.server.close()
        self.writer.close()

    def summary_extra(self) -> dict:
        stats = self.replay.stats_now()
        return {
            **{k: round(v, 2) for k, v in self.wire_bytes().items()},
            **self.server.stats.summary(),
            "replay_sampled": self.replay.sampled,
            "learner_held_s": round(self.held_s, 3),
            "replay_size": sum(int(s[keys.SHARD_SIZE]) for s in stats.values()),
            **{f"learner_{k}": round(v, 3) for k, v in self.times.items()},
        }
