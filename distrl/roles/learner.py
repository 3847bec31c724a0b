"""The learner's loop, written once: get a batch, update on it, publish; the session's services
(stop rule, checkpoints, evaluation schedule, peers) around it.

A recipe's learner subclasses :class:`Learner`, builds its model and calls :meth:`Learner.setup`,
then fills in the hooks it needs:

- :meth:`~Learner.next_batch` -> a batch, or ``None`` when none came in time (it may call
  ``session.should_stop()`` while it waits, so that a dead peer is noticed);
- :meth:`~Learner.update` (the loss, :meth:`~Learner.apply_loss`, then :meth:`~Learner.learned`);
- :meth:`~Learner.publish` (the new parameters where the actors read them);
- :meth:`~Learner.start`, :meth:`~Learner.stopped`, :meth:`~Learner.wind_down`, :meth:`~Learner.close`
  (threads, stop flags, goodbyes), :meth:`~Learner.evaluate`, :meth:`~Learner.summary_extra`.

:func:`lr_factor` and :func:`set_lr` are ``run.lr_schedule``: the clock is the run's budget, which a
``--resume`` restores, so a resumed run goes on from the same rate.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Optional

import torch

from distrl.nn.models import clip_towers
from distrl.nn.obs_norm import find_obs_norm, fold_observations
from distrl.roles.session import LearnerSession
from distrl.runtime import faults, supervisor
from distrl.runtime.context import RoleContext


def lr_factor(schedule: str, progress: float) -> float:
    """The learning rate's multiplier at ``progress`` (the fraction of the run's budget done, 0..1):
    1 for ``constant``, ``1 - progress`` for ``linear`` (PPO's Atari anneal, Schulman et al. 2017)."""
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return max(1.0 - progress, 0.0)
    raise ValueError(f"run.lr_schedule must be one of constant, linear, got {schedule!r}")


def set_lr(optim: torch.optim.Optimizer, factor: float) -> None:
    """Every parameter group's learning rate to ``factor`` times the one it started with. The start
    is kept in the group (``initial_lr``, as ``torch.optim.lr_scheduler`` keeps it), so it travels
    in the optimizer's state dict: a resumed run goes on from the same rate on the same clock."""
    for group in optim.param_groups:
        group.setdefault("initial_lr", group["lr"])
        group["lr"] = group["initial_lr"] * factor


class Learner:
    """The skeleton every learner shares: session, model and optimizer, restore, the loop, the final
    evaluation, the goodbyes and the summary. ``self.algo`` is the recipe's algorithm config."""

    model: torch.nn.Module
    optim: torch.optim.Optimizer

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg, self.algo = ctx, ctx.cfg, ctx.cfg.algo
        #: evaluation is scheduled by the session (``run.eval_interval_s``, the target's confirmation)
        self.session = LearnerSession(ctx, evaluate=self.evaluate)
        self.device = self.session.device
        self.tracker = self.session.tracker

    def setup(self, model: torch.nn.Module, optim: Optional[torch.optim.Optimizer] = None) -> Optional[dict]:
        """``model`` on the learner's device, its optimizer (Adam at ``algo.lr``, eps 1e-5, unless
        given), and the newest checkpoint loaded when resuming; returns that checkpoint (for extras)."""
        self.model = model.to(self.device)
        self.optim = optim or torch.optim.Adam(self.model.parameters(), lr=self.algo.lr, eps=1e-5)
        return self.session.restore(self.model, self.optim)

    # ---- the hooks ---------------------------------------------------------------------------------
    def next_batch(self) -> Optional[Any]:
        raise NotImplementedError

    def update(self, batch: Any) -> None:
        raise NotImplementedError

    def publish(self) -> None:
        """Make the parameters of ``tracker.updates`` visible to the other roles (after each update)."""

    def start(self) -> None:
        """Before the loop: threads the learner runs beside it."""

    def stopped(self) -> None:
        """Right after the loop (``session.stopping`` is set): tell the other ranks, before the final
        evaluation, which takes a while."""

    def wind_down(self) -> None:
        """After the final evaluation: wait until every live peer has heard the stop."""

    def close(self) -> None:
        """Always, last, even when the loop raised: stop threads, free shared memory."""

    def evaluate(self) -> list[float]:
        """Returns of ``run.eval_episodes`` greedy episodes (a Gaussian plays its mean)."""
        return self.session.greedy_returns(self.model.policy, head=self.model.head)

    def summary_extra(self) -> dict:
        """What ``summary.json`` holds beyond the tracker's figures."""
        return {}

    # ---- the loop ----------------------------------------------------------------------------------
    def run(self) -> dict:
        """Batches and updates until the stop rule says why; then the final evaluation, the goodbyes,
        the last checkpoint and ``summary.json`` (returned)."""
        session = self.session
        supervisor.beat()  # the watchdog is armed from here to the end (start() is bounded: its calls are)
        try:
            self.start()
            try:
                while not session.should_stop():
                    with session.budget("wait"):
                        batch = self.next_batch()
                    if batch is not None:
                        with session.budget("learn"):
                            self.update(batch)
                    session.tick(self.model, self.optim)
            finally:
                session.stopping.set()
                self.stopped()
            eval_returns = self.evaluate()
            self.wind_down()
        finally:
            self.close()
        return session.finish(session.stop_reason, eval_returns, self.model, self.optim, self.summary_extra())

    # ---- the steps of an update ------------------------------------------------------------------
    def apply_loss(
        self, loss: Optional[torch.Tensor] = None, towers: Optional[list] = None, lock=None
    ) -> Optional[torch.Tensor]:
        """One optimizer step: finite -> backward -> clip -> step, and ``tracker.updates`` counted.

        ``loss``: a scalar with its graph; ``None`` when the gradients are already in ``.grad``
        (A3C's server applies its workers' gradients), which are then checked instead. Each group
        of ``towers`` (default: ``model.tower_parameters()``) is clipped to ``algo.max_grad_norm`` on its
        own (:func:`distrl.nn.models.clip_towers`). ``lock`` is held around the step, for a model that
        another thread reads (SEED's inference). Returns the gradient norm before clipping, or ``None``
        when a non-finite loss or gradient (of a finite loss too) skipped the step: nothing applied,
        counted in ``skipped_nonfinite_updates``; a streak stops the run.
        """
        session, tracker = self.session, self.tracker
        towers = towers if towers is not None else self.model.tower_parameters()
        if loss is not None:
            if faults.due("nan_loss", self.ctx.rank, tracker.updates):
                loss = loss * float("nan")
            if not session.loss_is_finite(loss):
                return None
            self.optim.zero_grad(set_to_none=True)
            loss.backward()
            if faults.due_at("inf_grad", self.ctx.rank, tracker.updates, faults.INF_GRAD_TIMES):
                next(p for tower in towers for p in tower if p.grad is not None).grad.view(-1)[0] = float("inf")
        elif faults.due("nan_loss", self.ctx.rank, tracker.updates):  # A3C: the workers' gradients
            for p in (p for tower in towers for p in tower if p.grad is not None):
                p.grad.mul_(float("nan"))
        grad_norm = clip_towers(towers, self.algo.max_grad_norm)
        # a finite loss can still have a non-finite gradient (an overflow in backward): that step
        # would put NaN weights into the model, its publication and its checkpoint
        if not session.loss_is_finite(grad_norm):
            self.optim.zero_grad(set_to_none=True)
            return None
        if self.cfg.run.lr_schedule != "constant":
            set_lr(self.optim, lr_factor(self.cfg.run.lr_schedule, tracker.progress()[0]))
        with lock or nullcontext():
            self.optim.step()
            tracker.updates += 1
        return grad_norm

    def learned(
        self,
        stats: Any,
        grad_norm: torch.Tensor,
        observations: Optional[torch.Tensor] = None,
        lock=None,
        **metrics: float,
    ) -> None:
        """The tail of an update that stepped: fold the batch's ``observations`` into the model's
        normaliser (after the step that trained on them, before the publish: the actors get statistics
        and weights of one version), :meth:`publish`, and log ``stats`` (the loss's scalars) as
        ``learner/*`` with the gradient norm and ``metrics``."""
        norm = find_obs_norm(self.model)
        if norm is not None and observations is not None and not fold_observations(norm, observations, lock):
            self.tracker.count("nonfinite_observations_not_folded")
        self.publish()
        self.tracker.observe(
            {f"learner/{k}": float(v.detach()) for k, v in stats.items()}
            | {"learner/grad_norm": float(grad_norm)}
            | metrics
        )
