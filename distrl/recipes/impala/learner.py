"""The IMPALA learner: a bounded trajectory queue, V-trace updates, versioned parameters.

Handlers (on transport threads) only unpack, validate and enqueue, with a bounded wait, and reply
with the latest published parameters when the caller's are ``algo.params_every`` updates older;
all learning happens in ``run``.

Observation normalisation (continuous control: ``model.obs_norm``, :mod:`distrl.nn.obs_norm`): the
learner is the one place that sees every actor's data, so it merges the statistics
(:meth:`~distrl.roles.learner.Learner.learned`); they are parameters, so they reach the actors inside
the published state dict, with the weights of the same version.
"""

from __future__ import annotations

import queue
from typing import Optional

import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.algorithms.impala import impala_loss
from distrl.runtime.context import RoleContext
from distrl.data import keys
from distrl.data.compact import FRAMES_ACK, FRAMES_SEQ, FrameReceiver
from distrl.data.wire import WireMeter, payload_nbytes
from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic
from distrl.data.trajectory import receive_trajectory
from distrl.roles.board import ParameterBoard
from distrl.roles.learner import Learner


class ImpalaLearner(Learner):
    """Rank 0 of ``impala``: learns from every actor's trajectories."""

    def __init__(self, ctx: RoleContext):
        super().__init__(ctx)
        info = env_info(self.cfg.run.env)
        self.obs_spec = (info.shape, info.obs_dtype or torch.float32)  # what every trajectory must hold
        self.setup(ActorCritic.for_env(info, self.cfg.net))  # a Gaussian head for a Box
        # int64 [B, T] or float32 [B, T, A]
        self.action_spec = (self.model.head.action_shape, self.model.head.action_dtype)
        self.queue: queue.Queue = queue.Queue(maxsize=self.algo.queue_size)
        self.stopping = self.session.stopping
        self.board = ParameterBoard(self.model)
        self.actors = set(ctx.ranks_of("actor"))
        self.said_stop: set[int] = set()
        self.wire = WireMeter()  # trajectories in + parameters out, per env frame (as seed counts)
        self._env_errors: dict[int, int] = {}
        self.frames = FrameReceiver()  # each actor's last bootstrap stacks (frame-stack envs: Atari)
        self.publish()
        ctx.transport.serve("hello", self._hello)
        ctx.transport.serve("put_trajectory", self._put_trajectory)

    # ---- handlers (transport threads: never block long, never call out) -------------------
    def _reply(self, their_version: int) -> TensorDict:
        return self.board.reply(their_version, self.stopping.is_set(), self.algo.params_every)

    def _hello(self, td: TensorDict) -> TensorDict:
        return self._reply(-1)

    def _put_trajectory(self, msg: TensorDict) -> TensorDict:
        rank = int(msg[keys.ACTOR_RANK])
        if self.stopping.is_set() or rank in self.ctx.transport.lost_peers():
            # A rank declared lost (e.g. it was stopped and came back) is told to stop; its
            # late data is ignored rather than mixed into a run that has moved on.
            reply = self._reply(int(msg[keys.PARAMS_VERSION]))
            reply[keys.STOP] = torch.tensor(True)
            self.said_stop.add(rank)
            return reply
        self._env_errors[rank] = int(msg[keys.ENV_ERRORS])  # each actor's running count
        if any(self._env_errors.values()):
            self.tracker.set_count("env_errors", sum(self._env_errors.values()))
        seq = int(msg.get(FRAMES_SEQ, -1))
        try:  # a frame-stack trajectory first gets the frames its previous message sent
            traj, problem = receive_trajectory(
                self.frames.attach(rank, seq, msg[keys.TRAJ]), *self.obs_spec, self.action_spec
            )
        except ValueError as e:  # it chains to frames this learner does not hold
            traj, problem = None, str(e)
        if problem:
            self.session.reject(rank, problem)
        else:
            queued = msg.exclude(keys.TRAJ)  # the packed form is counted below; _next_batch reads the unpacked
            queued[keys.TRAJ] = traj
            try:
                self.queue.put(queued, timeout=self.algo.put_timeout_s)
            except queue.Full:
                self.tracker.count("dropped_trajectories")
        reply = self._reply(int(msg[keys.PARAMS_VERSION]))
        if FRAMES_SEQ in msg.keys():
            reply[FRAMES_ACK] = self.frames.hold(rank, seq, traj)
        if bool(reply[keys.STOP]):  # the learner stopped while this message waited for queue space
            self.said_stop.add(rank)
        self.wire.add(payload_nbytes(msg) + payload_nbytes(reply), traj.numel() if traj is not None else 0)
        return reply

    # ---- the loop: a batch of trajectories, a V-trace step, the parameters published ---------------
    def next_batch(self) -> Optional[TensorDict]:
        msgs = []
        while len(msgs) < self.algo.batch_trajectories:
            try:
                msgs.append(self.queue.get(timeout=0.2))
            except queue.Empty:
                if self.session.should_stop():
                    return None
        for m in msgs:
            self.tracker.add_episodes(m[keys.EPISODE_RETURNS].tolist())
            self.tracker.add_frames(m[keys.TRAJ].numel())
        return torch.cat([m[keys.TRAJ] for m in msgs], dim=0).to(self.device, non_blocking=True)

    def update(self, batch: TensorDict) -> None:
        self.tracker.add_lag(self.tracker.updates - batch[keys.POLICY_VERSION])
        faults.maybe_signal(self.ctx.rank, self.tracker.updates)
        out = impala_loss(self.model, batch, self.algo)
        grad_norm = self.apply_loss(out[keys.LOSS])
        if grad_norm is not None:  # the learner thread alone reads the model (handlers read the board)
            self.learned(
                out, grad_norm, batch[keys.OBSERVATION], **{"learner/bytes_per_env_step": self.wire.bytes_per_env_step}
            )

    def publish(self) -> None:
        self.board.publish(self.tracker.updates)

    def wind_down(self) -> None:
        self.session.peers.await_peers(lambda: self.actors - self.said_stop, drain=self.queue)

    def summary_extra(self) -> dict:
        return {"bytes_per_env_step": round(self.wire.bytes_per_env_step, 2)}
