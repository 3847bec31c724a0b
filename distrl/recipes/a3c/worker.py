"""The A3C worker: acts ``t_max`` steps in its vector of envs with the parameters it last
received, computes the n-step actor-critic gradient on that segment, pushes it with the version
it was computed from, and takes the newer parameters the reply carries.

A worker never waits for another worker. It waits for the server only for the reply to its push
(a round trip; the server applies gradients in its own loop, so the reply does not wait for the
apply): the next segment therefore starts from the newest parameters the server has published,
which need not include this worker's previous gradient yet (one source of staleness, measured).
Under ``algo.sync`` (A2C) it asks ``pull`` every ``algo.sync_poll_s`` until the round's mean has
been applied, so every gradient of a round comes from the same version. A push that times out (a
server busy or paused past ``transport.call_timeout_s``) is not the end: the worker waits while the
server may be alive (``distrl/transport/liveness.py``), pulls the parameters its lost reply carried,
and goes on; a server gone ends it.

With ``algo.wire_dtype`` bfloat16 the gradient is rounded to bfloat16 for the push and the
parameters arrive in bfloat16; the worker widens them to float32 and acts with exactly those, and
its gradient is taken at the same parameters (nothing loads new ones between ``act`` and
``gradient``), so the gradient is on-policy for the policy that acted. The server's float32
parameters differ from them by bfloat16's rounding (a relative 2^-8 at most).

Continuous actions (a Gaussian head, :mod:`distrl.nn.heads`) are float32 ``[B, A]`` from
``model.head.sample``, stored ``[B, T, A]`` in the segment. Observation normalisation: the
worker never updates its own statistics (frozen parameters, so their gradient slots are zeros);
it sends the moments of the segment's observations with the gradient (``obs_moments``), the server
merges every worker's, and they come back inside the parameter vector like any weight: a worker's
data counts once, at the server, and every worker normalises with the same statistics.
"""

from __future__ import annotations

import time

import torch
from tensordict import TensorDict
from torch.nn.utils import vector_to_parameters

from distrl.runtime import faults
from distrl.algorithms.a3c import a3c_loss
from distrl.runtime.context import RoleContext
from distrl.data import keys
from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic
from distrl.nn.obs_norm import batch_moments
from distrl.roles.env_runner import EnvRunner
from distrl.transport.base import CallTimeoutError, TransportError
from distrl.transport.liveness import patience_s, wait_while_alive


class A3CWorker:
    """One worker's envs (:class:`EnvRunner`), model copy and gradient; see the module docstring."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg = ctx, ctx.cfg
        self.algo = self.cfg.algo
        self.server = ctx.ranks_of("parameter_server")[0]
        info = env_info(self.cfg.run.env)
        self.model = ActorCritic.for_env(info, self.cfg.net)
        self.params = list(self.model.parameters())
        self.frozen = [not p.requires_grad for p in self.params]  # ObsNorm's statistics: zeros in the gradient
        self.version = -1  # no parameters yet: the first pull brings them
        self.wire_dtype = getattr(torch, self.algo.wire_dtype)
        seed = self.cfg.run.seed + 1000 * ctx.rank
        self.generator = torch.Generator().manual_seed(seed)
        self.runner = EnvRunner(
            self.cfg.run.env,
            self.algo.envs_per_worker,
            seed,
            ctx.rank,
            self.cfg.run.env_max_failures,
            self.cfg.atari,
            self.cfg.run.env_step_timeout_s,
        )

    def _load(self, reply: TensorDict) -> bool:
        """Take the reply's parameters if it has any; ``True`` when the server says stop."""
        if keys.PARAMS in reply.keys():
            # widened first: vector_to_parameters makes each parameter a view of the vector, dtype and all
            vector_to_parameters(reply[keys.PARAMS].to(torch.float32), self.params)
            self.version = int(reply[keys.PARAMS_VERSION])
        return bool(reply[keys.STOP])

    def act(self) -> tuple[TensorDict, list[float], list[int]]:
        """One segment: the ``[B, t_max]`` trajectory and the episodes that ended in it."""
        return self.runner.unroll(self._act, self.algo.t_max)

    def _act(self, obs: torch.Tensor) -> dict:
        """Actions ``[B]`` int64 (or ``[B, A]`` float32) sampled from the current policy for observations ``[B, F]``."""
        return {keys.ACTION: self.model.act(obs, self.generator)[0]}

    def flat_gradient(self) -> torch.Tensor:
        """``[P]`` float32 over every parameter in ``parameters()`` order, zeros in the slots of frozen
        ones (ObsNorm's statistics have no gradient; the server's vector keeps their place)."""
        return torch.cat(
            [p.new_zeros(p.numel()) if frozen else p.grad.reshape(-1) for p, frozen in zip(self.params, self.frozen)]
        )

    def gradient(self, traj: TensorDict, returns: list[float], lengths: list[int]) -> TensorDict:
        """The push message of segment ``traj``: the flat gradient ``[P]`` (in ``algo.wire_dtype``),
        its version, the episodes, and with observation normalisation the segment's observation
        moments ``[1 + 2F]`` float64."""
        a = self.algo
        out = a3c_loss(self.model, traj, a)
        self.model.zero_grad(set_to_none=True)
        out[keys.LOSS].backward()
        grad = self.flat_gradient().to(self.wire_dtype)
        msg = TensorDict(
            {
                keys.GRADIENT: grad,
                keys.POLICY_VERSION: torch.tensor(self.version),
                keys.FRAMES: torch.tensor(traj.numel()),
                keys.WORKER_RANK: torch.tensor(self.ctx.rank),
                keys.ENV_ERRORS: torch.tensor(self.runner.env_errors),  # the running count: summary's env_errors
                keys.EPISODE_RETURNS: torch.tensor(returns, dtype=torch.float32),
                keys.EPISODE_LENGTHS: torch.tensor(lengths, dtype=torch.int64),
                keys.WORKER_STATS: TensorDict({k: v.detach() for k, v in out.items()}),
            }
        )
        if self.model.obs_norm is not None:  # only then: a discrete model's message is what it always was
            msg[keys.OBS_MOMENTS] = batch_moments(traj[keys.OBSERVATION])
        return msg

    def _pull(self) -> bool:
        msg = TensorDict(
            {keys.WORKER_RANK: torch.tensor(self.ctx.rank), keys.POLICY_VERSION: torch.tensor(self.version)}
        )
        return self._load(self.ctx.transport.call_sync(self.server, "pull", msg, self.cfg.transport.call_timeout_s))

    def _await_round(self, version: int) -> bool:
        """A2C: pull until the server has moved past ``version``; ``True`` on stop.

        A round may wait for a stopped worker until the server declares it lost, one call timeout
        after its last answered ping; so give up only well after that (the server answers, but
        its loop is stuck)."""
        limit = 3 * self.cfg.transport.call_timeout_s
        deadline = time.monotonic() + limit
        while self.version <= version:
            if time.monotonic() > deadline:
                raise CallTimeoutError(f"no update past version {version} in {limit:g}s")
            time.sleep(self.algo.sync_poll_s)
            try:
                if self._pull():
                    return True
            except CallTimeoutError:  # a server paused, not stuck: its pause does not count against the round
                deadline += self._await_server()
        return False

    def _await_server(self) -> float:
        """After a push or pull timed out: wait while the server may be alive (``distrl/transport/liveness.py``)
        and return the wait; raises once it is gone, or silent past the bound. A push may have arrived or
        not: its gradient is lost or applied late, as staleness allows."""
        c = self.cfg
        return wait_while_alive(
            self.ctx.transport,
            self.server,
            f"worker {self.ctx.rank}",
            c.transport.call_timeout_s,
            patience_s(c.transport.call_timeout_s, c.run.watchdog_s),
            peer="the parameter server",
        )

    def run(self) -> None:
        t = self.ctx.transport
        try:
            if self._pull():
                return
            while True:
                faults.maybe_signal(self.ctx.rank, self.runner.unrolls)
                try:
                    segment = self.act()
                except Exception as e:  # the env failed: drop the partial segment, start over
                    self.runner.recover(e, f"worker {self.ctx.rank}")
                    continue
                budget = self.runner.budget
                with budget("learn"):
                    msg = self.gradient(*segment)
                with budget("send"):
                    try:
                        reply = t.call_sync(self.server, "push", msg, self.cfg.transport.call_timeout_s)
                    except CallTimeoutError:  # a server busy or paused: wait while it may be alive
                        self._await_server()
                        if self._pull():  # the push's reply is lost: its parameters (and a stop) come this way
                            return
                        continue
                if self._load(reply):
                    return
                with budget("wait"):
                    if self.algo.sync and self._await_round(int(msg[keys.POLICY_VERSION])):
                        return
                budget.maybe_send(t, self.server, self.ctx.rank)
        except TransportError as e:
            # The server is gone or told us nothing in time: it owns the run, so we end.
            print(f"[worker {self.ctx.rank}] parameter server unreachable, exiting: {e}", flush=True)
        finally:
            self.runner.close()
