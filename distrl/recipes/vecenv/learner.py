"""The vecenv learner: synchronous PPO on a batch of envs that lives on the policy's device.

Every rank runs this loop on its own envs and model replica:

    rollout (T steps, device only) -> values and GAE -> PPO epochs (gradients all-reduced)
    -> one all-gather of episode statistics and one max-reduce of the ranks' stop flags

The host never reads a tensor inside the rollout. It does once per update (the statistics and
the stop flag, one small copy each) and once per minibatch (whether the reduced gradient norm
is finite, which decides the optimizer step). Rank 0 owns the ``LearnerSession``: progress
lines, metrics, checkpoints, the stop rule and ``summary.json``, as every recipe's learner. It is the
one learner that is not a :class:`~distrl.roles.learner.Learner`: no other rank feeds it batches, every
rank runs the same loop (:meth:`VecEnvLearner.iterate`), and the ranks agree on the stop together.

Bytes on the wire (``bytes_per_env_step``, :attr:`VecEnvLearner.bytes_per_env_step`): the flat
gradient each rank all-reduces once per minibatch, per env frame of an update over all ranks; 0 at
world size 1. The per-update statistics collectives (advantage moments, episode rows, the stop
flag: well under 1 KB a rank) are left out, as ``distrl/data/wire.py`` leaves out headers.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading

import torch
import torch.distributed as dist
from tensordict import TensorDict

from distrl.runtime import faults
from distrl.envs.atari import eval_epsilon
from distrl.algorithms.estimators import gae
from distrl.runtime.context import RoleContext
from distrl.runtime.signals import STOP_SIGNALS
from distrl.envs.batched import NativeEnv, TorchRLEnv, evaluate_greedy, make_batched_env
from distrl.envs.torchrl_env import action_encoding
from distrl.envs.torch_envs.grid import TorchGridEnv
from distrl.logging.timing import TimeBudget
from distrl.nn.models import ActorCritic, resolve_device
from distrl.nn.obs_norm import batch_moments
from distrl.roles.session import LearnerSession
from distrl.recipes.vecenv.rollout import EpisodeStats, Rollout
from distrl.recipes.vecenv.update import UPDATE_STATS, normalize_advantage, ppo_update, world_size

VALUE_CHUNK = 4096  #: rows per value-network call when computing GAE's values


def rank_device(name: str) -> torch.device:
    """The device of this rank: ``cuda`` means this process's ``LOCAL_RANK`` GPU under torchrun."""
    device = resolve_device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def seeds(base: int, rank: int) -> tuple[int, int]:
    """``(env seed, torch seed)`` of ``rank``: distinct per rank, and distinct from each other
    (the env's generator and the global one are the same algorithm: equal seeds, equal streams)."""
    return base * 10_000 + 2 * rank, base * 10_000 + 2 * rank + 1


def reuse_lag(frames: int, epochs: int, num_minibatches: int) -> torch.Tensor:
    """The policy lag of every use of a rollout's ``frames`` samples (docs/concepts.md): a sample in
    minibatch ``m`` of epoch ``e`` is used after ``e * num_minibatches + m`` optimizer steps since
    the policy that collected it, as impala and seed count the steps since an actor's version.
    ``[epochs * frames]`` int64; the first minibatch of the first epoch is on-policy (0)."""
    minibatch = torch.arange(frames) * num_minibatches // frames  # balanced: which minibatch a sample is in
    return torch.cat([e * num_minibatches + minibatch for e in range(epochs)])


class VecEnvLearner:
    """One rank of ``vecenv`` (all ranks are learners; rank 0 also keeps the books)."""

    def __init__(self, ctx: RoleContext):
        self.ctx, self.cfg, self.algo = ctx, ctx.cfg, ctx.cfg.algo
        self.rank, self.world = ctx.rank, world_size()
        self.device = rank_device(self.cfg.run.device)
        env_seed, torch_seed = seeds(self.cfg.run.seed, self.rank)
        torch.manual_seed(torch_seed)
        a = self.algo
        self.env = make_batched_env(
            self.cfg.run.env, a.num_envs, self.device, env_seed, a.env_factory, a.obs_key, self.cfg.atari
        )
        env = self.env
        # observations normalised as net.obs_norm says (auto: flat observations with continuous actions)
        self.model = ActorCritic(env.obs_shape, env.num_actions, self.cfg.net, env.action_dim, env.action_mask)
        self.model = self.model.to(self.device)
        # fused: one kernel for all parameters; the per-tensor loop cost 5x more per step (318 vs
        # 64 us on these CPUs), a tenth of a minibatch's whole cost for CartPole's small MLPs.
        # trainable parameters only: ObsNorm's statistics are frozen parameters (distrl/nn/obs_norm.py)
        self.optim = torch.optim.Adam(
            [p for p in self.model.parameters() if p.requires_grad], lr=a.lr, eps=1e-5, fused=True
        )
        #: bytes of the flat gradient ``allreduce_gradients`` all-reduces (every trained parameter's, in
        #: algo.allreduce_dtype)
        wire_size = torch.empty((), dtype=getattr(torch, a.allreduce_dtype)).element_size()
        self.grad_bytes = sum(p.numel() * wire_size for p in self.model.parameters() if p.requires_grad)
        # rank 0 keeps the books; its session's evaluation confirms --target-return before stopping
        self.session = LearnerSession(ctx, evaluate=self.evaluate) if self.rank == 0 else None
        if self.session is not None and isinstance(env, TorchRLEnv):  # checkpoints say how the env takes actions
            self.session.action_encoding = action_encoding(env.env.action_spec)
        # Rank 0's session turns a stop signal (SIGTERM, or SIGINT, SIGHUP, SIGQUIT) into a checkpoint
        # and a stop; the other ranks only flag it and pass it on through the stop agreement, so a
        # preempted job ends in step, checkpointed (a rank ended by Ctrl-C would break the collective).
        self._sigterm = threading.Event()
        if self.session is None and threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, lambda *_: self._sigterm.set())
        if self.session is not None:
            self.session.restore(self.model, self.optim)
        self._sync_replicas()
        self.buf = Rollout.allocate(
            a.rollout_length, a.num_envs, env.obs_shape, env.num_actions, env.action_dim, self.device, env.obs_dtype
        )
        self.episodes = EpisodeStats(a.rollout_length, a.num_envs, self.device)
        self._act, self._step = self.model.act, self.env.step
        self._obs: torch.Tensor | None = None  # where the envs are: the next policy input [B, *F]
        self.iterations = 0  # updates done by this process (faults count in them)
        # where the time goes: rank 0 reports its own (collect = env + policy on device, learn = PPO)
        self.budget = self.session.budget if self.session is not None else TimeBudget()
        if a.compile:
            self._compile()

    def _sync_replicas(self) -> None:
        """Rank 0's parameters, optimizer state and frame count (fresh or restored) on every rank."""
        self.frames = self.session.tracker.env_frames if self.session is not None else 0  # all ranks' frames
        if self.world == 1:
            return
        state = [self.model.state_dict(), self.optim.state_dict(), self.frames] if self.rank == 0 else [None] * 3
        dist.broadcast_object_list(state, src=0, device=self.device)
        if self.rank != 0:
            self.model.load_state_dict(state[0])
            self.optim.load_state_dict(state[1])
            self.frames = state[2]

    def _compile(self) -> None:
        """``torch.compile`` the sampling policy and the native env's dynamics. Without
        ``fallback_random`` inductor's own RNG lowering made the compiled CartPole step about 5x
        slower than eager on these CPUs (``python -m experiments.bench_vecenv --compile`` measures both)."""
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True
        self._act = torch.compile(self.model.act, dynamic=False)
        # The MinAtar games stay eager: compiled, Breakout's step was no faster (4.67M against 4.52M
        # env steps/s at 4096 envs) and Seaquest's 30x slower (its enemy-slot count, hence its
        # shapes, changes from step to step: a graph each).
        if isinstance(self.env, NativeEnv) and not isinstance(self.env.env, TorchGridEnv):
            env = self.env.env
            # The pure dynamics function, not step_autoreset (which also rebinds the env's state);
            # set on the instance, which step_autoreset's self.dynamics looks up first.
            env.dynamics = torch.compile(type(env).dynamics, dynamic=False)

    @property
    def bytes_per_env_step(self) -> float:
        """Gradient bytes a rank all-reduces per update (one flat gradient per minibatch) over the
        env frames of that update across ranks; 0 at world size 1 (nothing is reduced). A ring
        all-reduce sends ``2 (W - 1) / W`` of the payload from each rank: 1x at 2 ranks."""
        if self.world == 1:
            return 0.0
        a = self.algo
        return a.epochs * a.num_minibatches * self.grad_bytes / (self.world * a.frames_per_rank)

    # ---- one update ---------------------------------------------------------------------------
    @torch.no_grad()
    def _rollout(self, obs: torch.Tensor) -> torch.Tensor:
        """Fills ``self.buf`` with ``T`` steps of every env; returns the observation to continue from."""
        b = self.buf
        for t in range(self.algo.rollout_length):
            action, log_prob = self._act(obs)
            next_obs, reward, term, trunc, new_obs = self._step(action)
            b.obs[t], b.action[t], b.log_prob[t] = obs, action, log_prob
            b.next_obs[t], b.reward[t], b.terminated[t], b.truncated[t] = next_obs, reward, term, trunc
            self.episodes.step(t, reward, term | trunc)
            obs = new_obs
        return obs

    @torch.no_grad()
    def _targets(self) -> TensorDict:
        """GAE advantages (normalized over every rank, unless per minibatch later) and value
        targets, as the flat batch (with the rollout's values for a clipped value loss)."""
        a, b = self.algo, self.buf
        # V of the true next observation everywhere, so a truncated episode bootstraps correctly.
        # In chunks of VALUE_CHUNK rows: at 8k+ rows the activations leave the CPU caches and a
        # forward costs 3x more per row (measured: 130 ns a row at 4096, 370-470 ns at 8192-32768).
        obs = torch.stack([b.obs, b.next_obs]).reshape(-1, *b.obs.shape[2:])
        values = torch.cat([self.model.value(c) for c in obs.split(VALUE_CHUNK)]).reshape(2, *b.reward.shape)
        adv, target = gae(
            a.gamma,
            a.gae_lambda,
            values[0],
            values[1],
            b.reward * a.reward_scale,
            b.terminated | b.truncated,
            b.terminated,
        )
        if not a.minibatch_adv_norm:
            adv = normalize_advantage(adv)
        return b.flat(adv, target, values[0] if a.clip_value else None)

    def _agree_to_stop(self, stats: torch.Tensor) -> bool:
        """Gathers every rank's episode statistics on rank 0, which books them and applies the
        stop rule; the stop flags are max-reduced, so every rank leaves after the same update."""
        rows = self.episodes.flush()
        if self.world > 1:
            gathered = [torch.empty_like(rows) for _ in range(self.world)]
            dist.all_gather(gathered, rows)
            rows = torch.stack(gathered)
        stop = torch.zeros(1, dtype=torch.int32, device=self.device)
        if self.session is not None:
            self._book(rows.reshape(self.world, -1).cpu(), stats.cpu())
            stop.fill_(int(self.session.should_stop()))
        else:
            stop.fill_(int(self._sigterm.is_set()))
        if self.world > 1:  # any rank may ask (rank 0's stop rule, another rank's SIGTERM): all leave together
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        stop = bool(stop.item())
        if stop and self.session is not None and self.session.stop_reason is None:
            self.session.stop_reason = "sigterm"  # another rank was asked to stop
        return stop

    def _book(self, rows: torch.Tensor, stats: torch.Tensor) -> None:
        """Rank 0: frames, episodes, updates, lag and the losses into the tracker; one tick."""
        a, session = self.algo, self.session
        tracker = session.tracker
        frames = self.world * a.frames_per_rank
        tracker.add_frames(frames)
        tracker.add_lag(reuse_lag(frames, a.epochs, a.num_minibatches))
        tracker.updates += a.epochs * a.num_minibatches
        episodes, lengths = 0, 0.0
        for row in rows:
            n, length_sum, latest = EpisodeStats.unpack(row)
            tracker.add_episodes(latest)
            tracker.episodes += n - len(latest)  # counted, though only the latest returns are kept
            episodes, lengths = episodes + n, lengths + length_sum
        metrics = {f"learner/{k}": float(v) for k, v in zip(UPDATE_STATS, stats)}
        metrics["learner/bytes_per_env_step"] = self.bytes_per_env_step
        if episodes:
            metrics["actor/episode_length_mean"] = lengths / episodes
        tracker.observe(metrics)
        session.tick(self.model, self.optim)

    # ---- the loop ------------------------------------------------------------------------------
    def iterate(self) -> bool:
        """One update: rollout, targets, PPO epochs, statistics; True once the ranks agree to stop."""
        faults.maybe_signal(self.rank, self.iterations)  # injected kill/stop/sigterm (reliability tests)
        self.iterations += 1
        if self._obs is None:
            self._obs = self.env.reset()
        with self.budget("collect"):
            self._obs = self._rollout(self._obs)
        if self.algo.anneal_lr:
            done = min(self.frames / self.cfg.run.total_frames, 1.0)
            for group in self.optim.param_groups:
                group["lr"] = self.algo.lr * (1.0 - done)
        self.frames += self.world * self.algo.frames_per_rank
        is_finite = self._is_finite if self.session is not None else None
        with self.budget("learn"):
            stats = ppo_update(self.model, self.optim, self._targets(), self.algo, is_finite)
        if getattr(self.model, "obs_norm", None) is not None:
            self._update_obs_norm()
        return self._agree_to_stop(stats)

    def _is_finite(self, grad_norm: torch.Tensor) -> bool:
        """Rank 0's check of the reduced gradient norm (the session counts, and stops on a streak)."""
        if faults.due("nan_loss", self.rank, self.session.tracker.updates):  # injected (reliability tests)
            grad_norm = grad_norm * float("nan")
        return self.session.loss_is_finite(grad_norm)

    def _update_obs_norm(self) -> None:
        """The rollout's observation moments, summed over the ranks, into ``model.obs_norm``."""
        moments = batch_moments(self.buf.obs)  # additive: the ranks' sum is the moments of all their data
        if self.world > 1:
            dist.all_reduce(moments)
        # every rank holds the same sum, so all refuse a NaN or inf together (the models stay equal)
        if not self.model.obs_norm.update_moments(moments) and self.session is not None:
            self.session.tracker.count("nonfinite_observations_not_folded")

    def run(self) -> dict | None:
        while not self.iterate():
            pass
        self.env.close()
        if self.session is None:
            return None
        return self.session.finish(
            self.session.stop_reason,
            self.evaluate(),
            self.model,
            self.optim,
            extra={"bytes_per_env_step": round(self.bytes_per_env_step, 2)},
        )

    def evaluate(self) -> list[float]:
        """Greedy returns of ``run.eval_episodes`` episodes on a fresh batch of the same env."""
        n = self.cfg.run.eval_episodes
        if n == 0:
            return []
        a = self.algo
        # Atari: the full game, unclipped (the same frames as gymnasium's path, tests/test_atari.py)
        full_game = dataclasses.replace(self.cfg.atari, episodic_life=False, reward_clipping=False)
        env = make_batched_env(
            self.cfg.run.env, n, self.device, self.cfg.run.seed + 10_000, a.env_factory, a.obs_key, full_game
        )
        try:  # (rank 0's: the session's evaluation, which beats and gives way to a stop signal)
            with self.session.evaluation(self.model.greedy) as greedy:
                eps = eval_epsilon(self.cfg.run.env, self.cfg.atari)
                return evaluate_greedy(env, greedy, epsilon=eps, seed=self.cfg.run.seed)
            return []
        finally:
            env.close()
