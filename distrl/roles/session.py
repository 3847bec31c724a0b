"""The services every learner uses besides learning: the stop rule, the other ranks' liveness
(:class:`~distrl.roles.peers.PeerWatch`), rejecting bad input, skipping non-finite losses, the
evaluation schedule, periodic checkpoints and the final summary.

The loop itself is :meth:`distrl.roles.learner.Learner.run`; it calls :meth:`LearnerSession.tick`
once per iteration. Handlers read :attr:`LearnerSession.stopping`, the one stop signal; counters go
through ``tracker.count``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import torch
from tensordict import TensorDict

from distrl.runtime import faults, supervisor
from distrl.runtime.checkpoint import (
    list_checkpoints,
    rescale_lr,
    resume_checkpoint,
    failed_write_line,
    run_state,
    save_best,
    save_checkpoint,
    set_rng_state,
)
from distrl.data import keys
from distrl.envs.gym import env_info, evaluate, is_factory
from distrl.logging.metrics import MetricsWriter, wandb_run_id
from distrl.logging.timing import TimeBudget
from distrl.logging.tracker import RunTracker
from distrl.logging.plots import plot_run_curves
from distrl.nn.models import resolve_device
from distrl.roles.peers import PeerWatch
from distrl.runtime.context import RoleContext
from distrl.runtime.signals import StopSignals

MAX_NONFINITE_STREAK = 10  #: consecutive non-finite losses after which the run stops
EVAL_SEED_OFFSET = 10_000  #: greedy evaluation seeds are run.seed + this: episodes no training env plays


class _Interrupted(Exception):
    """A stop signal came during an evaluation: its episodes are abandoned."""


class LearnerSession:
    """Book-keeping, liveness and persistence for the learner rank."""

    def __init__(self, ctx: RoleContext, evaluate: Optional[Callable[[], list[float]]] = None):
        self.ctx, self.cfg = ctx, ctx.cfg
        self.device = resolve_device(self.cfg.run.device)
        self.run_dir = Path(ctx.run_dir)
        self._wandb_id = wandb_run_id(self.run_dir) if self.cfg.run.logger == "wandb" else None
        writer = MetricsWriter(
            self.run_dir,
            self.cfg.run.logger,
            self.run_dir.name,
            self.cfg.to_dict(),
            self._wandb_id,
            recipe_name=ctx.recipe_name,
        )
        self.tracker = RunTracker(self.cfg, self.run_dir, ctx.roles, writer, name=ctx.recipe_name)
        self.stop_reason: Optional[str] = None
        #: set once the loop has stopped: the one stop signal every handler of the learner reads
        #: (a reply then says ``stop``; Sample Factory mirrors it into its shared memory)
        self.stopping = threading.Event()
        #: the other ranks' liveness: pings, the lost ones, every source lost (:class:`PeerWatch`)
        #: SIGTERM, SIGINT, SIGHUP, SIGQUIT: a checkpoint, then the stop (flags only: the loop, an
        #: evaluation's steps and the checkpoints look at them); SIGCONT: when a pause of ours ended
        self.signals = StopSignals()
        self.peers = PeerWatch(ctx, self.tracker, self.signals.paused_since)
        self._last_checkpoint = time.monotonic()
        self._saved_updates: Optional[int] = None  # the updates the newest checkpoint of this run holds
        self.checkpoint_error: Optional[str] = None  # a write that failed (a full disk): the run stops
        self._last_eval = time.monotonic()
        self._nonfinite_streak = 0
        #: the learner loop's time: ``wait`` (for data), ``learn``, ``eval``, ``checkpoint``, ``other``;
        #: other roles' budgets arrive in their messages (``tracker.budget_book.update``)
        self.budget = TimeBudget()
        if ctx.transport is not None:
            ctx.transport.serve("time_budget", self._time_budget)
        #: roles with state beyond model/optimizer/counters (a replay buffer...) set this; its
        #: dict is saved in every checkpoint and returned by :meth:`restore`.
        self.extra_state: Optional[Callable[[], dict]] = None
        #: greedy evaluation of the current policy (episode returns); when set, it runs every
        #: ``run.eval_interval_s`` (the best-scoring policy is kept as ``checkpoints/best.pt``), and a
        #: training mean that reaches ``run.target_return`` stops the run only if it confirms it
        self.evaluate = evaluate
        self._confirm_after = 0  # episode count before which no new confirmation is tried
        self._trained = None  # (model, optimizer), known from restore(), for the SIGTERM checkpoint
        #: how the training env takes discrete actions ("one_hot" or "categorical" for a TorchRL env,
        #: None for a gymnasium id), saved in every checkpoint so ``load_policy`` writes actions the
        #: same way; from ``--env module:function`` here, set by a learner whose env it builds (vecenv)
        env = ctx.env or (env_info(self.cfg.run.env) if is_factory(self.cfg.run.env) else None)
        self.action_encoding: Optional[str] = env.action_encoding if env is not None else None
        #: what load_policy rebuilds, saved in every checkpoint (nn/ cannot look the recipe up by name):
        #: ``Recipe.policy_network``, unless the learner trains another network (apex's SAC: ``"sac"``)
        self.policy_network: Optional[str] = ctx.recipe.policy_network if ctx.recipe is not None else None
        self.signals.install()  # main thread only; finish() gives the caller's handlers back

    # ---- stop rule and liveness -----------------------------------------------------------------
    def should_stop(self) -> bool:
        """Whether the loop should stop (``stop_reason`` says why). It also pings the peers, so a
        loop that calls it while it waits for data notices them die (``all_peers_lost``)."""
        supervisor.beat()  # the loop turns: the rank's watchdog (run.watchdog_s) sees progress
        if self.stop_reason is None and self.signals.received is not None:
            self.stop_reason, name = self.signals.reason, self.signals.received.name
            if self._trained is not None:  # checkpoint first: evaluation and goodbyes come after
                if self._saved_updates == self.tracker.updates:  # (one was being written as it came)
                    print(f"[learner] {name}: the newest checkpoint holds every update", flush=True)
                else:
                    self.checkpoint(*self._trained)
            print(f"[learner] {name}: stopping after a checkpoint", flush=True)
        if self.stop_reason is None:
            reason = self.tracker.stop_reason()
            if reason == "target_return" and not self._target_confirmed():
                reason = self.tracker.stop_reason(target=False)
            self.stop_reason = reason
        if self.stop_reason is None and self.peers.ranks:
            self.peers.heartbeat()  # here, not only in tick(): a loop waiting for data must see its peers die
            if self.peers.all_lost():
                self.stop_reason = "all_peers_lost"
        return self.stop_reason is not None

    def _target_confirmed(self) -> bool:
        """Does a greedy evaluation agree that the target is reached? (The training mean trails
        the policy and mixes in exploration, so the two can disagree either way.)"""
        if self.evaluate is None:
            return True
        if self.tracker.episodes < self._confirm_after:
            return False
        returns = self.evaluate()
        if self.signals.received is not None:  # cut short by a stop signal: the stop comes first
            return False
        score = sum(returns) / len(returns) if returns else float("inf")
        if returns and self._trained is not None:
            self._record_eval(returns, *self._trained)
        target = self.cfg.run.target_return
        if score >= target:
            return True
        self._confirm_after = self.tracker.episodes + 100  # try again after 100 more episodes
        print(
            f"[learner] training mean reached {target:g} but a greedy evaluation scored {score:.1f}; training on",
            flush=True,
        )
        return False

    def _time_budget(self, td: TensorDict) -> TensorDict:
        """Handler: another rank's running time totals (``TimeBudget.maybe_send``)."""
        rank = int(td[keys.WORKER_RANK])
        self.tracker.budget_book.update(rank, {k: float(v) for k, v in td.items() if k != keys.WORKER_RANK})
        return TensorDict()

    # ---- bad input --------------------------------------------------------------------------------
    def reject(self, rank: int, problem: str) -> None:
        if self.tracker.count("rejected_trajectories") <= 5:  # say it, but do not flood the log
            print(f"[learner] rejected a trajectory from rank {rank}: {problem}", flush=True)

    def loss_is_finite(self, loss: torch.Tensor) -> bool:
        """False (and counted) for a NaN/inf loss; too many in a row stops the run."""
        if torch.isfinite(loss).item():
            self._nonfinite_streak = 0
            return True
        self._nonfinite_streak += 1
        self.tracker.count("skipped_nonfinite_updates")
        if self._nonfinite_streak >= MAX_NONFINITE_STREAK:
            self.stop_reason = "nonfinite_loss"
            print(
                f"[learner] {MAX_NONFINITE_STREAK} non-finite losses in a row: stopping at the last good checkpoint",
                flush=True,
            )
        return False

    # ---- persistence ------------------------------------------------------------------------------
    def checkpoint(self, model: torch.nn.Module, optim: torch.optim.Optimizer, extra: dict | None = None):
        """Write the newest checkpoint; returns it (``None`` if the write failed: :meth:`_save`). Its two
        slow parts (the roles' extra state, an Ape-X replay read over calls that are each bounded; the
        write) are each preceded by a beat, so the watchdog bounds each by ``run.watchdog_s``."""
        self._last_checkpoint = time.monotonic()
        supervisor.beat()
        state = self._state(model, optim, extra)
        supervisor.beat()
        faults.maybe_signal(self.ctx.rank, self.tracker.updates, faults.IN_CHECKPOINT)
        path = self._save("checkpoint", lambda: save_checkpoint(self.run_dir, self.tracker.updates, state))
        self._saved_updates = self.tracker.updates if path else self._saved_updates
        supervisor.beat()
        return path

    def _save(self, what: str, write: Callable[[], Path]) -> Optional[Path]:
        """``write()``; one that fails (``OSError``: a full disk, a read-only folder) stops the run in one line."""
        try:
            return write()
        except OSError as e:
            print(failed_write_line(self.run_dir, what, self.tracker.updates, e), flush=True)
            self.checkpoint_error, self.stop_reason = self.checkpoint_error or f"{what}: {e}", "checkpoint_failed"
            return None

    def _state(
        self, model: torch.nn.Module, optim: torch.optim.Optimizer, extra: Optional[dict] = None, roles: bool = True
    ) -> dict:
        """What a checkpoint holds (:func:`~distrl.runtime.checkpoint.run_state`); ``roles=False`` leaves out
        :attr:`extra_state` (``best.pt`` is a policy to keep, not a run to resume: no Ape-X replay)."""
        fields = dict(wandb_id=self._wandb_id, action_encoding=self.action_encoding, policy_network=self.policy_network)
        roles_state = self.extra_state() if self.extra_state is not None and roles else None
        return run_state(model, optim, self.tracker.state_dict(), self.cfg.to_dict(), fields, roles_state, extra)

    def periodic_eval(self, model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
        """Every ``run.eval_interval_s``: a greedy evaluation, logged as ``eval/return_mean``.

        It runs on the learner's thread between updates: on CPU there is no idle core to move it
        to, and it costs one vector-env rollout (CartPole: 10 episodes of up to 500 steps, 0.3 s on
        a quiet machine and up to 1.9 s on a loaded one, hence 20 s between them by default; logged
        as ``learner/eval_s`` and in the time budget's ``eval``)."""
        interval = self.cfg.run.eval_interval_s
        if self.evaluate is None or interval <= 0 or time.monotonic() - self._last_eval < interval:
            return
        start = time.monotonic()
        returns = self.evaluate()
        if returns:
            self._record_eval(returns, model, optim)
        self._last_eval = time.monotonic()
        self.tracker.observe({"learner/eval_s": self._last_eval - start})

    def _record_eval(self, returns: list[float], model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
        """Count an evaluation of the current policy; the best so far is saved as ``best.pt``."""
        if self.tracker.add_eval(returns):
            state = self._state(model, optim, roles=False) | {"eval_returns": list(returns)}
            self._save("best.pt", lambda: save_best(self.run_dir, state))

    def restore(self, model: torch.nn.Module, optim: torch.optim.Optimizer) -> Optional[dict]:
        """Load the newest valid checkpoint when ``run.resume`` is set; returns it (for extras).

        Every learner calls it once with the objects it trains, so the session also keeps them for
        the checkpoint a SIGTERM asks for. Checkpoint files of which none loads raise
        :class:`~distrl.runtime.checkpoint.DamagedCheckpoints` (the runner prints its one line and exits 2)
        unless ``run.allow_fresh``."""
        self._trained = (model, optim)
        if not self.cfg.run.resume:
            return None
        state = resume_checkpoint(self.run_dir, self.cfg.run.allow_fresh)
        if state is None:
            print(f"[learner] --resume: no loadable checkpoint in {self.run_dir}, starting fresh", flush=True)
            return None
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        saved_lr, new_lr = state.get("config", {}).get("algo", {}).get("lr"), getattr(self.cfg.algo, "lr", None)
        if rescale_lr(optim, saved_lr, new_lr):  # a --resume --set algo.lr=X: the state's old rate would undo it
            print(f"[learner] --resume: algo.lr {saved_lr:g} -> {new_lr:g} applied (optimizer state kept)", flush=True)
        self.tracker.load_state_dict(state["tracker"])
        set_rng_state(state["rng"])
        print(f"[learner] resumed from update {self.tracker.updates}, {self.tracker.env_frames:,} frames", flush=True)
        done = self.tracker.stop_reason(target=False)
        if done:  # budgets count the whole run, resumed parts included
            print(
                f"[learner] the resumed run has already met its {done} budget: raise --total-frames or "
                f"--max-time-s to train on",
                flush=True,
            )
        return state

    # ---- the steps every learner shares -------------------------------------------------------------
    def greedy_returns(self, policy: Callable[[torch.Tensor], torch.Tensor], head=None) -> list[float]:
        """Returns of ``run.eval_episodes`` greedy episodes of ``policy`` (``obs [B, *F] -> logits or
        Q [B, A]``, or what ``head`` reads: :mod:`distrl.nn.heads`) on ``run.env``, seeded apart from
        every training env; ``[]`` when a stop signal cut it short (:meth:`evaluation`)."""
        run = self.cfg.run
        with self.evaluation(policy) as watched:
            return evaluate(
                watched, run.env, run.eval_episodes, run.seed + EVAL_SEED_OFFSET, self.device, self.cfg.atari, head
            )
        return []

    @contextlib.contextmanager
    def evaluation(self, policy: Callable[[torch.Tensor], torch.Tensor]):
        """``with session.evaluation(policy) as watched:`` an evaluation that calls ``watched`` for
        ``policy`` at every step: each step beats (progress for the watchdog; a hung env step is
        silence) and, once a stop signal came, abandons the episodes (the block is left; the caller
        returns no result), since the checkpoint and the stop cannot wait for them."""
        steps = 0

        def watched(obs: torch.Tensor) -> torch.Tensor:
            nonlocal steps
            steps += 1
            supervisor.beat()
            faults.maybe_signal(self.ctx.rank, steps, faults.IN_EVALUATION)
            if self.signals.received is not None:
                raise _Interrupted
            return policy(obs)

        try:
            yield watched
        except _Interrupted:
            print(f"[learner] {self.signals.received.name}: evaluation cut short at step {steps}", flush=True)

    def tick(self, model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
        """Once per learner loop iteration: liveness, progress, periodic checkpoint."""
        supervisor.beat()
        self.peers.heartbeat()
        with self.budget("eval"):
            self.periodic_eval(model, optim)
        self.tracker.budget_book.update(self.ctx.rank, self.budget.totals())
        self.tracker.maybe_report()
        if time.monotonic() - self._last_checkpoint >= self.cfg.run.checkpoint_interval_s:
            with self.budget("checkpoint"):
                self.checkpoint(model, optim)

    def finish(self, reason: str, eval_returns: list[float], model, optim, extra: Optional[dict] = None) -> dict:
        """Final progress row, checkpoint and ``summary.json``; closes the metric sinks."""
        supervisor.beat()  # the watchdog stays armed to the end: each step below beats or is bounded
        if eval_returns and reason != "nonfinite_loss":
            self._record_eval(eval_returns, model, optim)
        self.tracker.maybe_report(force=True)
        # keep the last good checkpoint as the newest; after a stop signal's checkpoint no second one
        # (the updates are all in it, and an Ape-X replay of gigabytes twice may not fit the 30 s given)
        signalled = self.signals.received is not None and self._saved_updates == self.tracker.updates
        if reason != "nonfinite_loss" and not signalled and self.checkpoint_error is None:
            self.checkpoint(model, optim)
        saved = list_checkpoints(self.run_dir)  # the newest is what --resume (or a restart) continues from
        extra = {"checkpoint": saved[-1].relative_to(self.run_dir).as_posix() if saved else None, **(extra or {})}
        if self.checkpoint_error is not None:  # whatever stopped the run, what it promised is not all kept
            reason, extra["checkpoint_error"] = "checkpoint_failed", self.checkpoint_error
        summary = self.tracker.summary(reason, eval_returns, extra)
        best = self.tracker.best_eval
        if best is not None and eval_returns and summary["eval_return_mean"] < best["return_mean"]:
            print(
                f"[{self.ctx.recipe_name}] the last policy evaluates at {summary['eval_return_mean']:.1f}, "
                f"below the best {best['return_mean']:.1f} (at {best['env_frames']:,} frames): that one is "
                f"checkpoints/best.pt",
                flush=True,
            )
        if self.tracker.writer is not None:
            self.tracker.writer.close()
        self.signals.restore()  # a run inside someone's process leaves their handlers as it found them
        supervisor.beat()
        if self.cfg.run.logger != "none":
            plot_run_curves(self.run_dir, self.cfg.recipe)
        ev = summary["eval_return_mean"]
        print(
            f"[{self.ctx.recipe_name}] done ({reason}): {summary['env_frames']:,} frames in {summary['wall_s']:.1f}s "
            f"= {summary['fps']:,.0f} fps, eval return {ev}, summary in {self.run_dir / 'summary.json'}",
            flush=True,
        )
        return summary
