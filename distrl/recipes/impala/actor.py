"""The IMPALA actor: steps a vector of envs with a local copy of the policy and ships
``[B, T]`` trajectories to the learner.

One message per unroll carries the trajectory (packed: each observation crosses the wire once,
``distrl/data/compact.py``), the actor's policy version and its finished episodes; the learner's
reply carries newer parameters once the actor's are ``algo.params_every`` updates old. So
parameters are picked up without a separate call, and the actor keeps stepping while a send is in
flight (one send outstanding at a time: the bound on its memory and on the learner's queue pressure).
A send that times out (a learner busy or paused past ``transport.call_timeout_s``) is not the end:
the actor waits while the learner may be alive and leaves only once it is gone
(``distrl/transport/liveness.py``).

Actions are what the model's head samples (:mod:`distrl.nn.heads`): int64 ``[B, T]`` indices of a
discrete space (uint8 on the wire), or float32 ``[B, T, A]`` draws of a Gaussian over a ``Box``,
stepped unclipped (the env clips them) and shipped as they are. A Gaussian policy (its ObsNorm and
GaussianParams) never runs on the numpy path: :meth:`NumpyPolicy.supports` refuses it.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.runtime.context import RoleContext
from distrl.data import keys
from distrl.data.compact import FRAMES_ACK, FRAMES_SEQ, FrameSender, pack_trajectory
from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic
from distrl.nn.numpy_policy import NumpyPolicy
from distrl.roles.env_runner import make_env_runner
from distrl.transport.base import CallTimeoutError, TransportError
from distrl.transport.liveness import patience_s, wait_while_alive


def wire_message(msg: TensorDict, frames: FrameSender | None = None, acked: int = -1) -> TensorDict:
    """``msg`` as it crosses the wire: its ``traj [B, T]`` packed (each observation once, uint8
    discrete actions, float32 ``[B, T, A]`` continuous ones as they are, one policy version;
    :func:`distrl.data.compact.pack_trajectory`), other keys as they are.
    With ``frames`` (frame-stack observations: Atari) each frame once, chained to the previous
    message's when the learner's last reply acknowledged it (``acked``), and the message numbered."""
    out = msg.exclude(keys.TRAJ)
    if frames is None:
        out[keys.TRAJ] = pack_trajectory(msg[keys.TRAJ])
    else:
        out[keys.TRAJ], out[FRAMES_SEQ] = frames.pack(msg[keys.TRAJ], acked)
    return out


class ImpalaActor:
    """Behaviour policy + vector env; see the module docstring for the protocol."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg = ctx, ctx.cfg
        algo = self.cfg.algo
        self.learner = ctx.ranks_of("learner")[0]
        self.num_envs, self.T = algo.envs_per_actor, algo.unroll_length
        info = env_info(self.cfg.run.env)
        self.frames = FrameSender() if info.frame_stack else None  # Atari: each frame crosses once
        self.acked = -1  # the message whose frames the learner holds (its last reply)
        self.model = ActorCritic.for_env(info, self.cfg.net)  # a Gaussian head (and ObsNorm) for a Box
        self.policy = self.model.policy
        self.version = -1  # no parameters yet: the first reply carries them
        self.seed = self.cfg.run.seed + 1000 * ctx.rank
        self.generator = torch.Generator().manual_seed(self.seed)
        # numpy forward and sampling at actor batch sizes, where torch's per-op dispatch dominates
        # (distrl/nn/numpy_policy.py); a network it cannot run keeps the torch path
        self.fast = NumpyPolicy(self.policy, self.seed) if NumpyPolicy.supports(self.policy) else None
        # gymnasium vector envs, or a TorchRL Collector over the user's env factory (--env module:function)
        self.runner = make_env_runner(
            self.cfg.run.env,
            self.num_envs,
            self.seed,
            ctx.rank,
            self.model,
            self._act,
            self.T,
            self.cfg.run.env_max_failures,
            self.cfg.atari,
            self.cfg.run.env_step_timeout_s,
        )

    def _load(self, reply: TensorDict) -> None:
        if keys.PARAMS in reply.keys():
            self.version = int(reply[keys.PARAMS_VERSION])
            self.runner.load_weights(self.model, reply[keys.PARAMS], self.version)
            if self.fast is not None:
                self.fast.refresh()  # the load copies in place; refreshing costs microseconds and assumes nothing

    def _act(self, obs: torch.Tensor) -> dict:
        # discrete: int64 [B] (the head's Gumbel-max); continuous: float32 [B, A]; log_prob [B] either way
        a, lp = self.fast.act(obs) if self.fast is not None else self.model.act(obs, self.generator)
        return {keys.ACTION: a, keys.ACTION_LOG_PROB: lp}

    def _unroll(self) -> TensorDict:
        """Step every env ``T`` times; returns the ``[B, T]`` trajectory with episode stats (as
        stepped: :func:`wire_message` packs it for the learner)."""
        B, T = self.num_envs, self.T
        traj, returns, lengths = self.runner.unroll(self._act, T)
        if keys.POLICY_VERSION not in traj.keys():  # the collector path stamps every frame itself
            traj[keys.POLICY_VERSION] = torch.full((B, T), self.version, dtype=torch.int64)
        if faults.due("bad_obs", self.ctx.rank, self.runner.unrolls):
            # both observations, so that the packed parts still fit and the learner's check names the fault
            bad = torch.zeros(B, T, traj[keys.OBSERVATION].shape[-1] + 1, dtype=torch.float64)
            traj[keys.OBSERVATION], traj[keys.NEXT_OBSERVATION] = bad, bad.clone()
        return TensorDict(
            {
                keys.TRAJ: traj,
                keys.PARAMS_VERSION: torch.tensor(self.version),
                keys.ENV_ERRORS: torch.tensor(self.runner.env_errors),
                keys.EPISODE_RETURNS: torch.tensor(returns, dtype=torch.float32),
                keys.EPISODE_LENGTHS: torch.tensor(lengths, dtype=torch.int64),
                keys.ACTOR_RANK: torch.tensor(self.ctx.rank),
            }
        )

    def _await_learner(self) -> TensorDict:
        """After a send timed out: wait while the learner may be alive (``distrl/transport/liveness.py``;
        raises once it is gone, or silent past the bound), then go on as if its reply had come empty.
        Its reply is lost, so nothing of the frames is acknowledged: the next message carries them whole."""
        c = self.cfg
        wait_while_alive(
            self.ctx.transport,
            self.learner,
            f"actor {self.ctx.rank}",
            c.transport.call_timeout_s,
            patience_s(c.transport.call_timeout_s, c.run.watchdog_s),
        )
        return TensorDict({keys.STOP: torch.tensor(False)})

    def run(self) -> None:
        t = self.ctx.transport
        timeout = self.cfg.transport.call_timeout_s
        try:
            self._load(
                t.call_sync(self.learner, "hello", TensorDict({keys.WORKER_RANK: torch.tensor(self.ctx.rank)}), timeout)
            )
            pending = None
            while True:
                faults.maybe_signal(self.ctx.rank, self.runner.unrolls)
                try:
                    msg = self._unroll()
                except Exception as e:  # the env failed: drop the partial trajectory, start over
                    self.runner.recover(e, f"actor {self.ctx.rank}")
                    continue
                budget = self.runner.budget
                if pending is not None:  # at most one send in flight
                    with budget("wait"):
                        try:
                            reply = pending.result()
                        except CallTimeoutError:  # a learner busy or paused: wait while it may be alive
                            reply = self._await_learner()
                    if bool(reply[keys.STOP]):
                        return
                    self._load(reply)
                    self.acked = int(reply.get(FRAMES_ACK, -1))
                # the parameters held now, maybe newer than the unroll's: a stale number here would
                # have the learner send the same parameters again
                msg[keys.PARAMS_VERSION] = torch.tensor(self.version)
                with budget("send"):
                    pending = t.call(
                        self.learner, "put_trajectory", wire_message(msg, self.frames, self.acked), timeout
                    )
                budget.maybe_send(t, self.learner, self.ctx.rank)
        except TransportError as e:
            # The learner is gone or told us nothing in time: it owns the run, so we end.
            print(f"[actor {self.ctx.rank}] learner unreachable, exiting: {e}", flush=True)
        finally:
            self.runner.close()
