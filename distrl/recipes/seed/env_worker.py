"""The SEED env worker: steps vectors of gymnasium envs; the learner's inference server acts.

No model lives here. The worker's ``algo.envs_per_worker`` envs are split into
``algo.groups_per_worker`` groups (each a ``SyncVectorEnv``), stepped in turn: while one group
steps, the other groups' requests are in flight, so stepping hides the round trip (0.3-2.6 ms on
these machines, idle to loaded, for a tiny ``rpc_sync`` on loopback) as long as a group's step takes about as long.
Each request carries a
whole group: its observations, and the reward, termination and truncation of its previous step
(plus the true final observations of envs whose episode just ended, for V-trace's bootstrap).
Trajectories are assembled on the server from this stream and never cross the wire again. A
frame stack (Atari's ``[4, 84, 84]``) crosses one new frame per step (``distrl/data/frame_stream.py``):
the server rebuilds the stacks.

On start the worker announces a fresh random run id on ``hello`` and stamps it on every
request: a server that sees a new run id for a group resets that group's state (partial
unrolls, episode returns, recurrent core states), as SEED does when an actor restarts.

An env group that raises is recreated the same way (``distrl/roles/env_recovery.py``: count,
one line, backoff, give up after ``run.env_max_failures`` in a row): the fresh group takes a fresh
run id of its own and sends its first observation, so the server drops the group's partial unroll
and starts it over, while the worker's other groups go on.

A request that times out (a learner busy or paused past ``transport.call_timeout_s``) is not the end
either: the worker waits while the learner may be alive (``distrl/transport/liveness.py``) and starts
that group over under a fresh run id (its actions were lost with the reply); a learner gone ends it.
"""

from __future__ import annotations

import os
from concurrent.futures import Future

import numpy as np
import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.data.frame_stream import StackSender
from distrl.runtime.context import RoleContext
from distrl.envs.gym import as_obs, env_info, final_observations, make_vector_env
from distrl.logging.timing import TimeBudget
from distrl.roles.env_recovery import EnvRecovery, StepWatch
from distrl.roles.batcher import ACTION, FINAL_OBS, GROUP, OBS, RANK, REWARD, RUN_ID, STOP, TERMINATED, TRUNCATED
from distrl.transport.base import CallTimeoutError, TransportError
from distrl.transport.liveness import patience_s, wait_while_alive


class SeedEnvWorker:
    """Env groups stepped in turn, one request in flight per group; see the module docstring."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg = ctx, ctx.cfg
        algo = self.cfg.algo
        self.learner = ctx.ranks_of("learner")[0]
        self.K, self.B = algo.groups_per_worker, algo.envs_per_group
        info = env_info(self.cfg.run.env)
        self.obs_shape, self.obs_dtype = info.shape, info.obs_dtype or torch.float32
        #: per group, when observations are frame stacks: each new frame crosses once
        self.senders = [StackSender() for _ in range(self.K)] if info.frame_stack else None
        self.run_id = _fresh_id()  # fresh per start: tells the server we restarted
        self.run_ids = [self.run_id] * self.K  # per group: a recreated group takes a fresh one
        self.seed = self.cfg.run.seed + 1000 * ctx.rank
        self.envs = [
            make_vector_env(self.cfg.run.env, self.B, self.seed + g * self.B, self.cfg.atari) for g in range(self.K)
        ]
        self.first_obs = [as_obs(e.reset(seed=self.seed + g * self.B)[0]) for g, e in enumerate(self.envs)]
        # the failures in a row are forgotten after one unroll's worth of good group steps
        self.recovery = EnvRecovery(self.cfg.run.env, self.cfg.run.env_max_failures, reset_after=algo.unroll_length)
        self.watch = StepWatch(self.cfg.run.env, self.cfg.run.env_step_timeout_s, f"env_worker {ctx.rank}")
        self.steps = 0
        #: env (stepping + building the message), wait (for the server's actions), send (the call)
        self.budget = TimeBudget()

    def _message(
        self,
        group: int,
        obs: torch.Tensor,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        final_obs: torch.Tensor,
    ) -> TensorDict:
        """One step message: ``obs [B, *F]``, ``reward/terminated/truncated [B]``, ``final_obs [D, *F]``
        (frame stacks: their new frames, ``frame_stream.py``)."""
        if self.senders is None:
            images = {OBS: obs, FINAL_OBS: final_obs}
        else:
            images = self.senders[group].encode(obs, terminated | truncated, final_obs)
        return TensorDict(
            {
                **images,
                REWARD: reward,
                TERMINATED: terminated,
                TRUNCATED: truncated,
                RANK: torch.tensor(self.ctx.rank),
                GROUP: torch.tensor(group),
                RUN_ID: torch.tensor(self.run_ids[group]),
            }
        )

    def _first_message(self, group: int) -> TensorDict:
        B = self.B
        if self.senders is not None:
            self.senders[group].reset()  # a new stream: every stack whole
        return self._message(
            group,
            self.first_obs[group],
            torch.zeros(B),
            torch.zeros(B, dtype=torch.bool),
            torch.zeros(B, dtype=torch.bool),
            torch.zeros(0, *self.obs_shape, dtype=self.obs_dtype),
        )

    def _step(self, group: int, action: torch.Tensor) -> TensorDict:
        """Step one group with the server's actions (``[B]`` int32, or ``[B, A]`` float32 for a Box,
        which the vector env clips to its bounds: distrl/nn/heads.py); returns its next message."""
        with self.watch:
            if faults.env_fails(self.ctx.rank, self.steps, self.recovery.failures):
                raise RuntimeError("injected environment failure")
            obs, reward, term, trunc, info = self.envs[group].step(action.numpy())
        done = term | trunc
        final = final_observations(obs, info, done)[done]  # [D, *F]: only the ended envs cross the wire
        return self._message(
            group,
            as_obs(obs),
            torch.from_numpy(reward.astype(np.float32)),
            torch.from_numpy(term),
            torch.from_numpy(trunc),
            as_obs(final),
        )

    def _recover(self, group: int, error: Exception) -> TensorDict:
        """After group ``group``'s env raised: count, back off (or give up: ``EnvFailedError``),
        recreate it under a fresh run id (the server drops its partial unroll); its first message."""
        self.recovery.failed(error, f"env_worker {self.ctx.rank} group {group}")
        try:
            self.envs[group].close()
        except Exception:  # a broken env may not close cleanly; it is dropped either way
            pass
        seed = self.seed + group * self.B + 100_000 * self.recovery.failures  # not the failed episodes again
        self.envs[group] = make_vector_env(self.cfg.run.env, self.B, seed, self.cfg.atari)
        self.first_obs[group] = as_obs(self.envs[group].reset(seed=seed)[0])
        self.run_ids[group] = _fresh_id()
        return self._first_message(group)

    def _await_learner(self, group: int) -> TensorDict:
        """After group ``group``'s request timed out: wait while the learner may be alive
        (``distrl/transport/liveness.py``; raises once it is gone, or silent past the bound), then
        start the group over: its actions are lost with the reply, so its envs are reset under a fresh
        run id (the server drops the partial unroll, as after an env error). Its first message."""
        c = self.cfg
        wait_while_alive(
            self.ctx.transport,
            self.learner,
            f"env_worker {self.ctx.rank} group {group}",
            c.transport.call_timeout_s,
            patience_s(c.transport.call_timeout_s, c.run.watchdog_s),
        )
        self.first_obs[group] = as_obs(self.envs[group].reset()[0])
        self.run_ids[group] = _fresh_id()
        return self._first_message(group)

    def run(self) -> None:
        t = self.ctx.transport
        timeout = self.cfg.transport.call_timeout_s
        hello = TensorDict({RANK: torch.tensor(self.ctx.rank), RUN_ID: torch.tensor(self.run_id)})
        try:
            if bool(t.call_sync(self.learner, "hello", hello, timeout)[STOP]):
                return
            inflight: list[Future] = [
                t.call(self.learner, "infer", self._first_message(g), timeout) for g in range(self.K)
            ]
            while True:
                faults.maybe_signal(self.ctx.rank, self.steps)  # fault injection (distrl/runtime/faults.py)
                self.steps += 1
                budget = self.budget
                for g in range(self.K):
                    with budget("wait"):
                        try:
                            reply = inflight[g].result()  # bounded: the call's timeout resolves it
                        except CallTimeoutError:  # a learner busy or paused: wait while it may be alive
                            inflight[g] = t.call(self.learner, "infer", self._await_learner(g), timeout)
                            continue
                    if bool(reply[STOP]):
                        return
                    with budget("env"):
                        try:
                            msg = self._step(g, reply[ACTION])
                            self.recovery.succeeded()
                        except Exception as e:  # the env failed: drop the step, start the group over
                            msg = self._recover(g, e)
                    with budget("send"):
                        inflight[g] = t.call(self.learner, "infer", msg, timeout)
                budget.maybe_send(t, self.learner, self.ctx.rank)
        except TransportError as e:
            # The learner is gone or answered nothing in time: it owns the run, so we end.
            print(f"[env_worker {self.ctx.rank}] learner unreachable, exiting: {e}", flush=True)
        finally:
            self.watch.close()
            for env in self.envs:
                env.close()


def _fresh_id() -> int:
    """A random run id (56 bits: fits an int64 tensor)."""
    return int.from_bytes(os.urandom(7), "little")
