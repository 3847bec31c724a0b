"""The Ape-X actor: epsilon-greedy on a local Q-network, n-step transitions with initial
priorities into a replay shard, parameters refreshed from the learner without waiting.

Actor ``i`` of ``N`` explores with ``eps_i = eps^(1 + alpha i / (N - 1))`` and inserts into shard
``i mod R``. Each unroll of ``T`` steps is joined to the last ``n - 1`` steps of the one before, so
every step gets its full n-step window (or the part of it before its episode ended). Its initial
priority is ``|y - Q(s, a)|`` under the local network that acted. An insert carries each
observation once, or each frame once for frame stacks (``transitions.py``); the shard rebuilds the
transitions. One insert and one request to the learner are in flight at a time; neither is waited
on unless the replay says ``held`` (the rate limiter), which is how the learner holds actors back. Every
``algo.params_interval_s`` the actor reports its episode returns, frames and hold times to the
learner (so its tracker counts them), and asks for newer parameters with the report once it has
taken ``algo.params_interval_frames`` env steps since it last asked: a pull of the minatar net
is 528 KB, which only that many steps make small per step. Until its first pull it acts with its
own initial network (the learner sends none untrained).
"""

from __future__ import annotations

import time

import torch
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.algorithms.apex import epsilon_ladder
from distrl.algorithms.estimators import nstep_returns
from distrl.data import keys
from distrl.envs.gym import env_info
from distrl.nn.action_mask import legal_from_output, random_legal
from distrl.nn.models import QNetwork
from distrl.data.transitions import pack_transitions, unpack_transitions
from distrl.runtime.context import RoleContext
from distrl.replay.inserter import Inserter
from distrl.roles.env_runner import make_env_runner
from distrl.transport.base import CallTimeoutError, TransportError


class ApexActor:
    """Ranks R+1.. of ``apex``; see the module docstring."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg, self.algo = ctx, ctx.cfg, ctx.cfg.algo
        a = self.algo
        self.learner = ctx.ranks_of("learner")[0]
        actors, self.shards = ctx.ranks_of("actor"), ctx.ranks_of("replay")
        self.index = actors.index(ctx.rank)
        self.epsilon = epsilon_ladder(len(actors), a.eps_base, a.eps_alpha)[self.index]
        self.inserter = Inserter(
            ctx.transport, self.shards, self.cfg.transport.call_timeout_s, a.hold_sleep_s, first=self.index, paced=True
        )  # shard i mod R first
        info = env_info(self.cfg.run.env)
        self.num_actions = info.num_actions
        self.frames = info.frame_stack > 0  # Atari: each frame of the stacks crosses once
        self.masked = info.action_mask  # the Q-values of illegal actions come out at the lowest float
        self.model = self.build_model(info)
        self.version = -1
        seed = self.cfg.run.seed + 1000 * ctx.rank
        self.generator = torch.Generator().manual_seed(seed)
        self.runner = make_env_runner(
            self.cfg.run.env,
            a.envs_per_actor,
            seed,
            ctx.rank,
            self.model,
            self._act,
            a.unroll_length,
            self.cfg.run.env_max_failures,
            self.cfg.atari,
            self.cfg.run.env_step_timeout_s,
        )
        self.carry: TensorDict | None = None  # the last n - 1 steps, [B, n-1]
        self.stats = {"frames": 0, "returns": []}  # not yet sent to the learner
        self._held_sent = 0.0  # of inserter.held_s
        # (getattr: until recipe.py declares the field, every report asks for parameters, as before)
        self.params_interval_frames = a.params_interval_frames
        self._unpulled = 0  # env steps since the last parameter request

    def build_model(self, info) -> torch.nn.Module:
        """The local network ``act`` reads, for ``info`` (:class:`~distrl.envs.info.EnvInfo`): a Q-network."""
        return QNetwork(info.shape, info.num_actions, self.cfg.net, self.algo.dueling, info.action_mask)

    def _act(self, obs: torch.Tensor) -> dict:
        q = self.model(obs)
        greedy = q.argmax(-1)
        explore = torch.rand(obs.shape[0], generator=self.generator) < self.epsilon
        if self.masked:  # explore among the legal actions only (a masked Q-network's output says which)
            uniform = random_legal(legal_from_output(q), self.generator)
        else:
            uniform = torch.randint(self.num_actions, greedy.shape, generator=self.generator)
        action = torch.where(explore, uniform, greedy)
        return {keys.ACTION: action, keys.CHOSEN_ACTION_VALUE: q.gather(-1, action[:, None]).squeeze(-1)}

    def transitions(self, traj: TensorDict) -> tuple[TensorDict, torch.Tensor]:
        """n-step transitions ``[N]`` of the steps whose window ends in ``traj [B, T]`` (joined to the
        carry), and their initial raw priorities ``[N]``: what the shard stores of :meth:`insert_message`."""
        return unpack_transitions(self.insert_message(traj))

    @torch.no_grad()
    def insert_message(self, traj: TensorDict) -> TensorDict:
        """The insert (:func:`~distrl.data.transitions.pack_transitions`) of the ``N`` n-step
        transitions whose window ends in ``traj [B, T]`` (joined to the carry), with their initial
        raw priorities."""
        n, gamma = self.algo.n_step, self.algo.gamma
        window = traj if self.carry is None else torch.cat([self.carry, traj], dim=1)
        self.carry = window[:, window.shape[1] - (n - 1) :] if n > 1 else None
        nxt = window[keys.NEXT]
        G, discount, last = nstep_returns(
            nxt[keys.STEP_REWARD][..., 0], nxt[keys.STEP_TERMINATED][..., 0], nxt[keys.STEP_TRUNCATED][..., 0], gamma, n
        )
        priority = self.priorities(window, G, discount, last)
        return pack_transitions(window, G, discount, last, priority, self.version, frames=self.frames)

    def priorities(
        self, window: TensorDict, G: torch.Tensor, discount: torch.Tensor, last: torch.Tensor
    ) -> torch.Tensor:
        """Initial raw priorities ``[B * T']`` of the window's transitions (``G``, ``discount``, ``last``
        ``[B, T']``): ``|y - Q(s, a)|`` with the acting network (max over the bootstrap state)."""
        Tp = G.shape[1]
        rows = torch.arange(last.shape[0])[:, None]  # [B, 1]: with last [B, T'], any observation shape
        bootstrap = window[keys.NEXT][keys.OBSERVATION][rows, last]  # [B, T', *F]
        y = G.reshape(-1) + discount.reshape(-1) * self.model(bootstrap.flatten(0, 1)).max(-1).values
        return (y - window[keys.CHOSEN_ACTION_VALUE][:, :Tp].reshape(-1)).abs()

    def _load(self, reply: TensorDict) -> None:
        if keys.PARAMS in reply.keys():
            self.version = int(reply[keys.PARAMS_VERSION])
            self.runner.load_weights(self.model, reply[keys.PARAMS], self.version)

    def _params_request(self) -> TensorDict:
        s, self.stats = self.stats, {"frames": 0, "returns": []}
        held, self._held_sent = self.inserter.held_s - self._held_sent, self.inserter.held_s
        return TensorDict(
            {
                keys.ACTOR_RANK: torch.tensor(self.ctx.rank),
                keys.PARAMS_VERSION: torch.tensor(self.version),
                keys.FRAMES: torch.tensor(s["frames"]),
                keys.HELD_S: torch.tensor(held),
                keys.EPSILON: torch.tensor(self.epsilon),
                keys.ENV_ERRORS: torch.tensor(self.runner.env_errors),
                keys.EPISODE_RETURNS: torch.tensor(s["returns"], dtype=torch.float32),
            }
        )

    def _goodbye(self, timeout: float) -> None:
        """Told to stop by a shard: hand the learner the last statistics, and let it know we heard."""
        try:
            self.ctx.transport.call_sync(self.learner, "actor_stats", self._params_request(), timeout)
        except TransportError:
            pass

    def run(self) -> None:
        t = self.ctx.transport
        timeout = self.cfg.transport.call_timeout_s
        T = self.algo.unroll_length
        try:
            reply = t.call_sync(
                self.learner, "hello", TensorDict({keys.WORKER_RANK: torch.tensor(self.ctx.rank)}), timeout
            )
            self._load(reply)
            pending, last_ask = None, time.monotonic()
            while not bool(reply[keys.STOP]):
                faults.maybe_signal(self.ctx.rank, self.runner.unrolls)
                try:
                    traj, returns, _ = self.runner.unroll(self._act, T)
                except Exception as e:  # the env failed: drop the partial unroll and its carry
                    self.runner.recover(e, f"actor {self.ctx.rank}")
                    self.carry = None
                    continue
                if faults.due_at("nan_reward", self.ctx.rank, self.runner.unrolls):  # poisoned data, once
                    traj[keys.NEXT][keys.STEP_REWARD].view(-1)[0] = float("nan")
                self.stats["frames"] += traj.numel()
                self._unpulled += traj.numel()
                self.stats["returns"].extend(returns)
                budget = self.runner.budget
                with budget("priorities"):
                    msg = self.insert_message(traj)
                with budget("wait"):  # the previous insert, held back by the rate limiter when it must
                    settled = self.inserter.settle()
                if settled != Inserter.TAKEN:
                    if settled == Inserter.NO_SHARD:
                        print(f"[actor {self.ctx.rank}] no replay shard left, exiting", flush=True)
                    self._goodbye(timeout)
                    return
                with budget("send"):
                    self.inserter.send(msg)
                budget.maybe_send(t, self.learner, self.ctx.rank)
                if pending is not None and pending.done():
                    ask, pending = pending, None
                    try:
                        reply = ask.result()
                    except CallTimeoutError:  # a learner busy (a long evaluation) or paused: ask again
                        continue
                    self._load(reply)
                if pending is None and time.monotonic() - last_ask >= self.algo.params_interval_s:
                    pull = self._unpulled >= self.params_interval_frames
                    self._unpulled = 0 if pull else self._unpulled
                    pending = t.call(self.learner, "params" if pull else "actor_stats", self._params_request(), timeout)
                    last_ask = time.monotonic()
        except TransportError as e:
            print(f"[actor {self.ctx.rank}] learner unreachable, exiting: {e}", flush=True)
        finally:
            self.runner.close()
