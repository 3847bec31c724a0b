"""The Ape-X learner: double DQN with n-step targets on batches sampled by priority from the
replay shards, new priorities sent back, parameters published to the actors.

Each loop iteration takes the batch whose sample was requested one iteration earlier and
requests the next one before training on it (``algo.prefetch``), so the round trip to the shards
overlaps the update. The priorities of a batch are sent after its update; the next batch was
drawn before they landed, as in the paper. The target network is copied every
``algo.target_update_interval`` updates. Handlers (``hello``, ``params``, ``actor_stats``) only read
the published parameters and add the actors' statistics to a pending record under a lock; the loop
folds them into the tracker.

Bytes on the wire (``bytes_per_env_step``): what an actor puts there per env step, its inserts
(counted by the shards, per transition taken) plus its exchanges with this learner (counted here,
per env frame the actors report). What the learner samples from replay is reported beside it
(``sample_bytes_per_env_step``), not in it: ``samples_per_insert`` transitions per step, inherent.
"""

from __future__ import annotations

import collections
import copy
import threading
import time
from typing import Optional

import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.algorithms.apex import double_dqn_loss, epsilon_ladder
from distrl.data import keys
from distrl.data.wire import WireMeter, payload_nbytes
from distrl.envs.gym import env_info
from distrl.nn.models import QNetwork
from distrl.runtime.context import RoleContext
from distrl.replay.client import ShardedReplayClient, nonfinite_inserts
from distrl.replay.weights import annealed_beta
from distrl.roles.board import ParameterBoard
from distrl.roles.learner import Learner


class ApexLearner(Learner):
    """Rank 0 of ``apex``. What learns (the Q-networks, the replay client, the loop's hooks) is built
    in ``__init__``; what feeds the replay and reads the parameters, Ape-X's actors, in :meth:`serve`
    (central inference instead in experiments/examples/custom/seed_apex_learner.py)."""

    def __init__(self, ctx: RoleContext):
        super().__init__(ctx)
        state = self.build(env_info(self.cfg.run.env))
        saved = (state or {}).get("extra", {})
        self._restored_replay = saved.get("replay")
        if saved.get("target") is not None:  # the target as it was: between copies it is not the online net
            self.target.load_state_dict(saved["target"])
        self.replay = ShardedReplayClient(
            ctx.transport,
            ctx.ranks_of("replay"),
            self.cfg.transport.call_timeout_s,
            self.cfg.run.seed,
            self.session.peers.lose,
            self.cfg.run.log_interval_s / 2,
        )
        if saved.get("replay_rng") is not None:  # which shard each sample comes from goes on where it was
            self.replay.generator.set_state(saved["replay_rng"])
        self.session.extra_state = self.extra_state
        self._request: Optional[list] = None
        self.held_s = 0.0  # the learner's own wait on held samples
        self.times = collections.Counter()  # where the loop's time goes (design rule 9)
        self.serve(ctx)

    def build(self, info) -> Optional[dict]:
        """What learns, for ``info`` (:class:`~distrl.envs.info.EnvInfo`): double DQN's Q-network, its Adam
        and its target (a copy of the weights; ``__init__`` then loads a resumed run's own target);
        returns the checkpoint restored, if any."""
        # masked (info.action_mask): the double-DQN target's argmax and max run over legal actions only
        model = QNetwork(info.shape, info.num_actions, self.cfg.net, self.algo.dueling, info.action_mask)
        model = model.to(self.device)
        state = self.setup(model, torch.optim.Adam(model.parameters(), lr=self.algo.lr, eps=self.algo.adam_eps))
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        return state

    def extra_state(self) -> dict:
        """What a checkpoint holds beyond the model and optimizer: every shard's contents (each with its
        sampler's RNG), the target network (double DQN's or SAC's critics: it trails the online one) and
        the generator that picks each sample's shard."""
        return {
            "replay": self.replay.states(),
            "target": self.target.state_dict(),
            "replay_rng": self.replay.generator.get_state(),
        }

    def serve(self, ctx: RoleContext) -> None:
        """The actors' side: their parameter pulls and statistics (handlers), the board they read."""
        self.actors = set(ctx.ranks_of("actor"))
        ladder = epsilon_ladder(len(self.actors), self.algo.eps_base, self.algo.eps_alpha)
        #: rungs whose episodes make the training mean (the stop rule's trigger; every rung is logged)
        self._counted_eps = max(self.algo.report_max_eps, min(ladder)) + 1e-9
        self.stopping = self.session.stopping
        self.board = ParameterBoard(self.model)
        self.said_stop: set[int] = set()
        self._lock = threading.Lock()
        self._pending = {"frames": 0, "returns": [], "lag": [], "held_s": 0.0}  # from actors, not yet folded
        self._rungs: dict[float, collections.deque] = {}  # epsilon -> recent returns
        self._env_errors: dict[int, int] = {}
        self.wire = WireMeter()  # the actors' requests to this learner and the replies, per env frame they report
        self.actor_held_s = 0.0  # every actor's wait on held inserts, as they reported it
        self.publish()
        ctx.transport.serve("hello", self._hello)
        ctx.transport.serve("params", self._params)
        ctx.transport.serve("actor_stats", self._actor_stats)

    # ---- handlers (transport threads) -------------------------------------------------------------
    def _reply(self, rank: int, their_version: Optional[int]) -> TensorDict:
        """``stop``, and the published parameters when they are newer than ``their_version`` (``None``:
        the actor asked for none). An actor told to stop gets none: it leaves."""
        stop = self.stopping.is_set() or rank in self.ctx.transport.lost_peers()
        if stop:
            self.said_stop.add(rank)
        if stop or their_version is None:
            return TensorDict({keys.STOP: torch.tensor(stop)})
        return self.board.reply(their_version, stop)

    def _hello(self, msg: TensorDict) -> TensorDict:
        # Version 0 is the untrained init: an actor's own init is as good, so a fresh run sends none
        # (528 KB per actor for the minatar net); a resumed one sends what it restored.
        reply = self._reply(int(msg[keys.WORKER_RANK]), 0)
        self.wire.add(payload_nbytes(msg) + payload_nbytes(reply), 0)
        return reply

    def _params(self, msg: TensorDict) -> TensorDict:
        """An actor's statistics, answered with newer parameters if there are any."""
        return self._report(msg, pull=True)

    def _actor_stats(self, msg: TensorDict) -> TensorDict:
        """An actor's statistics, between its parameter pulls (``algo.params_interval_frames``)."""
        return self._report(msg, pull=False)

    def _report(self, msg: TensorDict, pull: bool) -> TensorDict:
        rank, version, frames = int(msg[keys.ACTOR_RANK]), int(msg[keys.PARAMS_VERSION]), int(msg[keys.FRAMES])
        with self._lock:
            p = self._pending
            p["frames"] += frames
            if float(msg[keys.EPSILON]) <= self._counted_eps:
                p["returns"].extend(msg[keys.EPISODE_RETURNS].tolist())
            p["held_s"] += float(msg[keys.HELD_S])
            if frames:  # policy lag at the actor: updates since the parameters it acted with
                p["lag"].append((self.tracker.updates - version, frames))
            eps = round(float(msg[keys.EPSILON]), 6)
            self._rungs.setdefault(eps, collections.deque(maxlen=20)).extend(msg[keys.EPISODE_RETURNS].tolist())
            self._env_errors[rank] = int(msg[keys.ENV_ERRORS])
        reply = self._reply(rank, version if pull else None)
        self.wire.add(payload_nbytes(msg) + payload_nbytes(reply), frames)
        return reply

    def wire_bytes(self) -> dict[str, float]:
        """``bytes_per_env_step``, an actor's traffic: its inserts (``insert_bytes_per_env_step``)
        and its exchanges with this learner (``params_bytes_per_env_step``); and, not in it, what
        the learner samples (``sample_bytes_per_env_step``). The shards' figures are from their last
        stats reply."""
        inserted, frames, sampled = self.replay.wire_totals()
        insert = inserted / frames if frames else 0.0
        params = self.wire.bytes_per_env_step
        return {
            "bytes_per_env_step": insert + params,
            "insert_bytes_per_env_step": insert,
            "params_bytes_per_env_step": params,
            "sample_bytes_per_env_step": sampled / frames if frames else 0.0,
        }

    # ---- the loop: a prioritized sample, a double-DQN step, new priorities, parameters published ---
    def start(self) -> None:
        if self._restored_replay:
            self.replay.load_states(self._restored_replay)

    def _fold_actor_stats(self) -> None:
        with self._lock:
            p, self._pending = self._pending, {"frames": 0, "returns": [], "lag": [], "held_s": 0.0}
            rungs = {eps: sum(r) / len(r) for eps, r in self._rungs.items() if r}
            errors = sum(self._env_errors.values())
        tracker = self.tracker
        tracker.add_frames(p["frames"])
        tracker.add_episodes(p["returns"])
        for lag, frames in p["lag"]:
            tracker.add_lag(torch.full((frames,), max(lag, 0), dtype=torch.int64))
        if errors:
            tracker.set_count("env_errors", errors)
        self.actor_held_s += p["held_s"]
        metrics = {"actor/held_s": self.actor_held_s} | self.replay.poll_stats()  # run totals, as learner/held_s
        if metrics.get("replay/nonfinite_inserts"):  # poisoned data the shards refused, in summary.json's counters
            tracker.set_count("rejected_nonfinite_inserts", int(metrics["replay/nonfinite_inserts"]))
        wire = self.wire_bytes()
        metrics |= {f"learner/{k}": wire[k] for k in ("bytes_per_env_step", "params_bytes_per_env_step")}
        for i, eps in enumerate(sorted(rungs, reverse=True)):  # rung 0 explores most
            metrics[f"actor/return_rung{i}"] = rungs[eps]
        tracker.observe(metrics)

    def next_batch(self) -> Optional[TensorDict]:
        self._fold_actor_stats()
        if not self.replay.live:
            self.session.stop_reason = "replay_lost"
            print("[learner] every replay shard is lost: stopping with a checkpoint of what is left", flush=True)
            return None
        beta = annealed_beta(self.algo.beta0, self.tracker.updates, self.algo.beta_anneal_updates)
        pending = self._request or self.replay.request(self.algo.batch_size)
        self._request = None
        start = time.perf_counter()
        batch = self.replay.collect(pending, beta, self.algo.weight_norm)
        self.times["wait_sample_s"] += time.perf_counter() - start
        if self.algo.prefetch:
            self._request = self.replay.request(self.algo.batch_size)
        if batch is None:  # not enough data yet, or the rate limiter holds the learner back
            time.sleep(self.algo.hold_sleep_s)
            self.held_s += self.algo.hold_sleep_s
            return None
        return batch.to(self.device, non_blocking=True)

    def update(self, batch: TensorDict) -> None:
        start = time.perf_counter()
        self._learn(batch)
        self.times["update_s"] += time.perf_counter() - start

    def _learn(self, batch: TensorDict) -> None:
        tracker, a = self.tracker, self.algo
        faults.maybe_signal(self.ctx.rank, tracker.updates)
        out = double_dqn_loss(self.model, self.target, batch, a)
        grad_norm = self.apply_loss(out[keys.LOSS], towers=[list(self.model.parameters())])
        if grad_norm is None:
            return
        if tracker.updates % a.target_update_interval == 0:
            self.target.load_state_dict(self.model.state_dict())
        self.publish()
        td = out[keys.TD_ERROR].abs()
        self.replay.update_priorities(batch, td)
        tracker.observe(
            {
                "learner/loss": float(out[keys.LOSS].detach()),
                "learner/grad_norm": float(grad_norm),
                "learner/q_mean": float(out[keys.Q_MEAN]),
            }
            | self.replay_metrics(batch, td)
        )

    def replay_metrics(self, batch: TensorDict, td: torch.Tensor) -> dict[str, float]:
        """``learner/*`` of a trained batch ``[B]`` and its TD errors ``td [B]``, whatever the loss:
        the samples' age and weights, and where the learner's time went."""
        return {
            "learner/td_abs": float(td.mean()),
            "learner/sample_age": float((self.tracker.updates - batch[keys.POLICY_VERSION]).float().mean()),
            "learner/weight_mean": float(batch[keys.PRIORITY_WEIGHT].mean()),
            "learner/batch": batch.shape[0],
            "learner/held_s": self.held_s,
            "learner/wait_sample_s": self.times["wait_sample_s"],
            "learner/update_s": self.times["update_s"],
        }

    def publish(self) -> None:
        self.board.publish(self.tracker.updates)

    def stopped(self) -> None:
        self.replay.stop()  # actors held by the rate limiter hear stop from their shard

    def evaluate(self) -> list[float]:
        return self.session.greedy_returns(self.model)

    def wind_down(self) -> None:
        # they hear it from us or their shard; pings find the ones a SIGTERM already ended, not waited for
        self.session.peers.await_peers(lambda: self.actors - self.said_stop, heartbeat=True)

    def summary_extra(self) -> dict:
        stats = self.replay.stats_now()  # the shards' final wire totals and store sizes
        if nonfinite_inserts(stats):
            self.tracker.set_count("rejected_nonfinite_inserts", nonfinite_inserts(stats))
        store_bytes = sum(int(s["store_bytes"]) for s in stats.values())  # allocated, for a full replay
        return {
            **{k: round(v, 2) for k, v in self.wire_bytes().items()},
            "replay_bytes_per_slot": round(store_bytes / (self.algo.capacity * max(len(stats), 1)), 1),
            "replay_sampled": self.replay.sampled,
            "learner_held_s": round(self.held_s, 3),
            "actor_held_s": round(self.actor_held_s, 3),
            "replay_size": sum(self.replay.sizes.values()),
            **{f"learner_{k}": round(v, 3) for k, v in self.times.items()},
        }

    def run(self) -> dict:
        summary = super().run()
        self.replay.stop(exit_=True)  # after the final checkpoint, which read the shards' contents
        return summary
