"""Sample Factory's rollout worker: two groups of envs stepped in turn (double buffering), every
tensor in shared memory, only slot numbers on the wire.

Per group the worker owns a trajectory slot (``traj[slot]``, ``[B, T]``) and a spare. One step of
a group: write its observations at ``traj.observation[slot, :, t]``, ring its inference
rank's doorbell (rank, group, slot, t: 16 bytes, ``distrl/recipes/sf/doorbell.py``) and, while that
request is in flight, step the *other* group. When the reply comes, read the actions inference
wrote at ``traj.action[slot, :, t]``, step the envs, write the outcome (reward, end flags, true
next observation) at ``t``. So a slot's step ``t`` is written by the worker before the request and
after the reply, and by inference only in between: no step is written while another role reads it.
The actions are stepped as inference wrote them: int64 indices ``[B]``, or float32 ``[B, A]`` for a
Gaussian policy (unclipped: the vector env clips them to the box, ``distrl/envs/gym.py``).

After ``T`` steps the worker hands the slot in (its number through the learner's doorbell, the
``SLOT`` channel; the returns of the episodes that ended are in the slot, at ``("next",
"episode_return")`` where ``done``) and switches to its spare. The learner's reply names the next
spare; the worker reads it only at its next hand-in, ``T`` steps later, so it waits only when the
learner holds every other slot: that is the backpressure. A slot is handed in once, never
written after. A wait longer than ``algo.slot_timeout_s`` pings the learner and waits on while it
answers, or while it may be paused (``distrl/transport/liveness.py``); only a learner gone ends it.

A worker writes only slots that are its own (``distrl/recipes/sf/slots.py`` says why this is
race-free without a lock): every slot number it is given is checked to be one (``0 <= s < S``;
none, -1, means the run is stopping or the worker was evicted, and it leaves with one line), and
before each write of a step and before each hand-in it reads its ``evicted`` flag (a numpy int
compare): once the learner has declared it lost (it was stopped, then continued) it exits there,
writing nothing more.

A group whose env raises is recreated (``distrl/roles/env_recovery.py``: count, one line, backoff,
give up after ``run.env_max_failures`` in a row) and starts its slot over at step 0: the slot's
partial unroll is dropped by being overwritten, and inference keeps no per-env state to reset. The
worker's goodbye carries its count (``summary.json``'s ``env_errors``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.runtime.affinity import pin_rank
from distrl.runtime.context import RoleContext
from distrl.data import keys, shm
from distrl.envs.gym import final_observations, make_vector_env
from distrl.logging.timing import TimeBudget
from distrl.roles.env_recovery import EnvRecovery, StepWatch
from distrl.recipes.sf import doorbell as bell
from distrl.recipes.sf.inference import inference_rank_of
from distrl.recipes.sf.slots import STOP as STOP_FLAG
from distrl.transport.base import CallTimeoutError, TransportError
from distrl.transport.liveness import patience_s, wait_while_alive


class _Evicted(Exception):
    """The learner declared this worker lost: its slots are no longer its own."""


class _Group:
    """One env group's state: its vector env, current observation, slot, spare slot (``None``:
    the learner's reply to the last hand-in names it) and step."""

    def __init__(self, env, obs: np.ndarray, slot: int, spare: Optional[int]):
        self.env, self.obs, self.slot, self.spare, self.t = env, obs, slot, spare, 0
        self.ep_return = np.zeros(len(obs))


class SFRolloutWorker:
    """Ranks after the inference ranks in ``sf``; see the module docstring."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg, self.algo = ctx, ctx.cfg, ctx.cfg.algo
        self.learner = ctx.ranks_of("learner")[0]
        self.server = inference_rank_of(ctx, ctx.rank)
        self.me = TensorDict({keys.WORKER_RANK: torch.tensor(ctx.rank)})
        #: env (stepping, writing shared memory), wait (for actions), handoff (for a free slot)
        self.budget = TimeBudget()
        self.steps = 0
        self.stopped = False
        # the failures in a row are forgotten after one unroll's worth of good group steps
        self.recovery = EnvRecovery(
            self.cfg.run.env, self.cfg.run.env_max_failures, reset_after=self.algo.unroll_length
        )
        self.watch = StepWatch(self.cfg.run.env, self.cfg.run.env_step_timeout_s, f"rollout_worker {ctx.rank}")

    # ---- set-up ------------------------------------------------------------------------------
    def _attach(self) -> bool:
        t, timeout = self.ctx.transport, self.cfg.transport.call_timeout_s
        reply = t.call_sync(self.learner, "hello", self.me, timeout)
        if bool(reply[keys.STOP]):
            return False
        path = shm.decode_path(reply[keys.SHM_PATH])
        self.shared = shm.attach(path)
        # both channels' ends before "attached": then the files go
        self.bell = bell.WorkerBell(path, self.server, self.ctx.rank, bell.ACT)
        self.slot_bell = bell.WorkerBell(path, self.learner, self.ctx.rank, bell.SLOT)
        self.traj, self.control, self.evicted = (
            self.shared[keys.TRAJ],
            self.shared[keys.CONTROL],
            self.shared[keys.EVICTED],
        )
        # numpy views of the shared tensors, taken once: a nested TensorDict lookup costs about
        # 5 us and a torch indexed write 3.5 us against numpy's 0.4-0.9 us, and a group step makes
        # eight of each (about 5% of a 128-env CartPole step in torch)
        nxt = self.traj[keys.NEXT]
        self.buf = {
            keys.OBSERVATION: self.traj[keys.OBSERVATION].numpy(),
            keys.ACTION: self.traj[keys.ACTION].numpy(),
            keys.NEXT_OBSERVATION: nxt[keys.OBSERVATION].numpy(),
            **{
                k: nxt[k].numpy()[..., 0]
                for k in (
                    keys.STEP_REWARD,
                    keys.STEP_TERMINATED,
                    keys.STEP_TRUNCATED,
                    keys.STEP_DONE,
                    keys.EPISODE_RETURN,
                )
            },
        }
        self.stop_flag, self.evicted_flag = self.control.numpy()[STOP_FLAG : STOP_FLAG + 1], self.evicted.numpy()
        slots = t.call_sync(self.learner, "attached", self.me, timeout)[keys.SLOT]  # [G, 2]: slot, spare
        self.num_slots = self.traj.shape[0]
        if slots.shape != (self.algo.groups_per_worker, 2) or not all(map(self._valid, slots.flatten().tolist())):
            print(
                f"[rollout_worker {self.ctx.rank}] no trajectory slots from the learner ({slots.tolist()}): "
                "evicted before it attached, exiting",
                flush=True,
            )
            return False
        B, seed = self.algo.envs_per_group, self.cfg.run.seed + 1000 * self.ctx.rank
        self.seed = seed
        self.groups = []
        for g in range(self.algo.groups_per_worker):
            env = make_vector_env(self.cfg.run.env, B, seed + g * B, self.cfg.atari)
            obs = env.reset(seed=seed + g * B)[0]
            self.groups.append(_Group(env, obs, int(slots[g, 0]), int(slots[g, 1])))
        # off the learner's core(s) from now on, env threads included: not before, as the resets
        # (~1.4 s of CPU for 16 Pong envs) would then share fewer cores while the learner waits
        pin_rank(False, self.algo.learner_cores)
        return True

    # ---- ownership ------------------------------------------------------------------------------
    def _valid(self, slot: Optional[int]) -> bool:
        return slot is not None and 0 <= slot < self.num_slots

    def _own(self, slot: int) -> None:
        """Raise ``_Evicted`` unless ``slot`` is still this worker's to write (it is, until it hands
        it in or the learner evicts it: then every slot it held is retired)."""
        if self.evicted_flag[self.ctx.rank]:
            raise _Evicted(f"slot {slot} is no longer its own")

    # ---- one group's step ----------------------------------------------------------------------
    def _request(self, g: int) -> None:
        """Write group ``g``'s observations at its slot's step ``t`` and ask for actions."""
        grp = self.groups[g]
        self._own(grp.slot)
        self.buf[keys.OBSERVATION][grp.slot, :, grp.t] = grp.obs
        self.bell.ask(g, grp.slot, grp.t)

    def _step(self, g: int) -> bool:
        """Step group ``g`` with the actions inference wrote; write the outcome; hand in a full slot.
        False when the group got no next slot (the run is stopping)."""
        grp, buf = self.groups[g], self.buf
        s, t = grp.slot, grp.t
        action = buf[keys.ACTION][s, :, t]
        try:
            with self.watch:
                if faults.env_fails(self.ctx.rank, self.steps, self.recovery.failures):
                    raise RuntimeError("injected environment failure")
                obs, reward, term, trunc, info = grp.env.step(action)
        except Exception as e:  # the env failed: drop the slot's partial unroll, start the group over
            self._recover(g, e)
            return True
        self.recovery.succeeded()
        # fault injection (distrl/runtime/faults.py): mid-step, slots held
        faults.maybe_signal(self.ctx.rank, self.steps)
        self._own(s)  # the env step is the long wait: it may have been evicted meanwhile
        done = term | trunc
        buf[keys.NEXT_OBSERVATION][s, :, t] = final_observations(obs, info, done)
        buf[keys.STEP_REWARD][s, :, t], buf[keys.STEP_TERMINATED][s, :, t] = reward, term
        buf[keys.STEP_TRUNCATED][s, :, t], buf[keys.STEP_DONE][s, :, t] = trunc, done
        grp.ep_return += reward
        buf[keys.EPISODE_RETURN][s, :, t] = grp.ep_return  # read where done: one write, no branch
        if done.any():
            grp.ep_return[done] = 0.0
        grp.obs, grp.t = obs, t + 1
        return grp.t < self.algo.unroll_length or self._hand_in(g)

    def _recover(self, g: int, error: Exception) -> None:
        """After group ``g``'s env raised: count, back off (or give up: ``EnvFailedError``), recreate
        it and restart its slot at step 0 (the next request overwrites the partial unroll)."""
        self.recovery.failed(error, f"rollout_worker {self.ctx.rank} group {g}")
        grp, B = self.groups[g], self.algo.envs_per_group
        try:
            grp.env.close()
        except Exception:  # a broken env may not close cleanly; it is dropped either way
            pass
        seed = self.seed + g * B + 100_000 * self.recovery.failures  # not the failed episodes again
        grp.env = make_vector_env(self.cfg.run.env, B, seed, self.cfg.atari)
        grp.obs, grp.t = grp.env.reset(seed=seed)[0], 0
        grp.ep_return[:] = 0.0

    def _hand_in(self, g: int) -> bool:
        """Hand group ``g``'s full slot to the learner and go on in its spare; False when there is
        none (the run is stopping: the learner answered -1, or the wait saw the stop flag)."""
        grp = self.groups[g]
        self._own(grp.slot)
        self.slot_bell.ask(g, grp.slot, grp.t)
        grp.t = 0
        if grp.spare is not None:  # the first hand-in: the spare came with "attached"
            grp.slot, grp.spare = grp.spare, None
            return True
        stopped = lambda: bool(self.stop_flag[0] or self.evicted_flag[self.ctx.rank])  # noqa: E731
        with self.budget("handoff"):
            while True:  # the reply to the group's last hand-in: read T steps after it was sent
                try:
                    slot = self.slot_bell.wait(g, self.algo.slot_timeout_s, stopped)
                    break
                except TimeoutError:
                    # A learner busy evaluating or checkpointing holds every slot for a while: that is
                    # backpressure, not a failure. Wait on while it answers a ping (raises if it is
                    # gone), or while it may be paused (liveness.py); a frozen one is its supervisor's
                    # watchdog's business (run.watchdog_s).
                    self._ping_learner()
        self._own(grp.slot)  # an evicted worker's wait ends as a stopped one's
        if not self._valid(slot):  # never indexed with: -1 would be the last slot, another worker's
            return False
        grp.slot = slot
        return True

    def _ping_learner(self) -> None:
        """Return once the learner answers a ping; raise once it is gone, or silent past the bound."""
        t, timeout = self.ctx.transport, self.cfg.transport.call_timeout_s
        try:
            t.call_sync(self.learner, "ping", None, timeout)
        except CallTimeoutError:  # stopped (SIGSTOP), not gone: its pause is waited out
            who, limit = f"rollout_worker {self.ctx.rank}", patience_s(timeout, self.cfg.run.watchdog_s)
            wait_while_alive(t, self.learner, who, timeout, limit)

    # ---- the loop --------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            if not self._attach():
                return
            for g in range(len(self.groups)):
                self._request(g)
            stopped, timeout = lambda: bool(self.stop_flag[0]), self.algo.request_timeout_s
            while not stopped():
                self.steps += 1
                for g, grp in enumerate(self.groups):
                    with self.budget("wait"):
                        status = self.bell.wait(g, timeout, stopped)
                    if status == bell.ERROR:
                        raise TransportError(f"inference rank {self.server} refused a request of group {g}")
                    if status != bell.OK or stopped():
                        return
                    with self.budget("env"):
                        if not self._step(g):  # stopped while waiting for a slot
                            return
                    with self.budget("env"):
                        self._request(g)
                self.budget.maybe_send(self.ctx.transport, self.learner, self.ctx.rank)
        except _Evicted as e:  # declared lost (it was stopped): nothing more is written
            print(
                f"[rollout_worker {self.ctx.rank}] evicted by the learner: {e}, exiting before writing it", flush=True
            )
        except (TransportError, TimeoutError) as e:
            print(f"[rollout_worker {self.ctx.rank}] exiting: {e}", flush=True)
        finally:
            self._close()

    def _close(self) -> None:
        if hasattr(self, "watch"):
            self.watch.close()
        for grp in getattr(self, "groups", []):
            grp.env.close()
        for b in (getattr(self, "bell", None), getattr(self, "slot_bell", None)):
            if b is not None:
                b.close()
        try:  # the last time budget, and a goodbye, so the learner need not wait for this rank at the end
            self.budget.send(self.ctx.transport, self.learner, self.ctx.rank, 5.0).result(5.0)
            bye = self.me.clone().update({keys.ENV_ERRORS: torch.tensor(self.recovery.failures)})
            self.ctx.transport.call_sync(self.learner, "bye", bye, 5.0)
        except (TransportError, TimeoutError):
            pass
