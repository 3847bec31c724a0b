"""Sample Factory's pieces in one process: shared-memory files, the slot pool's life cycle (a lost
worker's slots reclaimed), the parameter seqlock, the lag cap, the APPO advantage against a slow
loop, the doorbells' records, and the rollout worker's double buffering against a fake learner and
a fake inference rank."""

from __future__ import annotations

import copy
import math
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.appo import appo_loss
from distrl.algorithms.estimators import vtrace_pg_advantage
from distrl.recipes import get_recipe
from distrl.runtime.context import RoleContext
from distrl.config import override
from distrl.data import keys, shm
from distrl.recipes.sf.recipe import debug
from distrl.nn.models import ActorCritic
from distrl.recipes.sf import doorbell as bell
from distrl.recipes.sf.learner import drop_lagged
from distrl.recipes.sf.slots import PARAM_SEQ, STOP, SlotError, SlotPool, publish_params, read_params, rollout_layout
from distrl.transport.local import LocalHub
from references import slow_gae, slow_vtrace_targets


# ---------------------------------------------------------------- shared-memory files


def test_shared_memory_is_seen_across_handles_and_outlives_its_files(tmp_path):
    td, path = shm.create(TensorDict(x=torch.zeros(4, 3)), "test", root=tmp_path)
    other = shm.attach(path)
    other["x"][1] = 7.0
    assert td["x"][1].tolist() == [7.0] * 3  # the same pages, no copy
    shm.unlink(path)
    assert not path.exists()
    td["x"][2] = 3.0  # the mappings live on without the files
    assert other["x"].sum() == 30.0
    assert shm.decode_path(shm.encode_path(path)) == str(path)


def test_directories_of_dead_owners_are_swept(tmp_path):
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process can hold this pid
    stale = tmp_path / f"distrl-sf-{dead}-0123456789ab"
    live = tmp_path / f"distrl-sf-{os.getpid()}-0123456789ab"
    for d in (stale, live):
        d.mkdir()
    assert shm.sweep_stale(tmp_path) == [stale] and live.exists()
    shm.remove_owned_by(os.getpid(), tmp_path)  # what a supervisor does when its child died
    assert not live.exists()


# ---------------------------------------------------------------- slot pool


def test_slot_life_cycle_and_a_lost_worker_reclaimed():
    pool = SlotPool(3)
    a, b, c = pool.acquire(5), pool.acquire(5), pool.acquire(6)
    assert sorted([a, b, c]) == [0, 1, 2] and pool.acquire(6) == -1 and pool.refused == 1
    with pytest.raises(SlotError):
        pool.hand_in(6, a)  # not its slot
    pool.hand_in(5, a)
    with pytest.raises(SlotError):
        pool.hand_in(5, a)  # handed in twice: the learner owns it now
    with pytest.raises(SlotError):
        pool.release(b)  # the learner never frees a slot a worker is writing
    assert pool.reclaim(5) == [b]  # rank 5 is killed holding b: b is free again, a stays the learner's
    assert pool.acquire(6) == b
    pool.release(a)
    assert pool.acquire(7) == a and pool.reclaimed == 1


# ---------------------------------------------------------------- parameters through shared memory


def test_parameter_seqlock_never_returns_a_torn_copy():
    shared = rollout_layout(1, 1, 1, 1, 4)
    out = torch.zeros(4)
    assert read_params(shared, 0, out) is None  # nothing published yet
    publish_params(shared, torch.arange(4.0), version=3)
    seq, version = read_params(shared, 0, out)
    assert version == 3 and out.tolist() == [0, 1, 2, 3]
    assert read_params(shared, seq, out) is None  # nothing newer
    shared["control"][PARAM_SEQ] += 1  # a write in progress
    assert read_params(shared, seq, out) is None


# ---------------------------------------------------------------- the lag cap


def test_rows_older_than_the_cap_are_dropped_and_counted():
    rows = TensorDict({keys.POLICY_VERSION: torch.tensor([[9, 10], [4, 10], [7, 8]])}, batch_size=[3, 2])
    kept, dropped = drop_lagged(rows, updates=10, max_lag=3)
    assert kept[keys.POLICY_VERSION].tolist() == [[9, 10], [7, 8]] and dropped == 2  # lag 6 > 3
    assert drop_lagged(rows, updates=10, max_lag=6)[1] == 0


# ---------------------------------------------------------------- APPO


def test_vtrace_pg_advantage_matches_a_slow_loop():
    g = torch.Generator().manual_seed(0)
    B, T, gamma = 3, 6, 0.9
    r = lambda *s: torch.rand(*s, 1, generator=g)  # noqa: E731
    value, next_value, reward = r(B, T), r(B, T), r(B, T)
    terminated = torch.zeros(B, T, 1, dtype=torch.bool)
    terminated[0, 2] = True
    done = terminated.clone()
    done[1, 3] = True  # a truncation
    vs = r(B, T)
    adv = vtrace_pg_advantage(vs, next_value, value, reward, done, terminated, gamma)
    for b in range(B):
        for t in range(T):
            boot = next_value[b, t] if (t == T - 1 or done[b, t]) else vs[b, t + 1]
            want = reward[b, t] + gamma * (0.0 if terminated[b, t] else boot) - value[b, t]
            assert torch.allclose(adv[b, t], want)


def test_next_values_equal_the_critic_on_every_next_observation_of_a_real_unroll():
    """Rows stepped as a rollout worker steps them (true final observations at episode ends, both
    terminations and truncations): the critic's values reused from the next step equal the critic
    run on every next observation."""
    import gymnasium as gym
    import numpy as np
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from distrl.algorithms.estimators import next_values
    from distrl.envs.gym import final_observations

    B, T = 8, 40
    env = SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=15) for _ in range(B)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    o, _ = env.reset(seed=0)
    obs, next_obs = torch.zeros(B, T, 4), torch.zeros(B, T, 4)
    done, term = torch.zeros(B, T, 1, dtype=torch.bool), torch.zeros(B, T, 1, dtype=torch.bool)
    rng = np.random.default_rng(0)
    for t in range(T):
        obs[:, t] = torch.from_numpy(np.asarray(o, np.float32))
        o, _, te, tr, info = env.step(rng.integers(0, 2, B))
        next_obs[:, t] = torch.from_numpy(np.asarray(final_observations(o, info, te | tr), np.float32))
        done[:, t, 0], term[:, t, 0] = torch.from_numpy(te | tr), torch.from_numpy(te)
    assert term.any() and (done & ~term).any()  # both kinds of episode end are in the rows
    model = ActorCritic(4, 2)
    with torch.no_grad():
        got = next_values(model.value, model.value(obs), next_obs, done)
        want = model.value(next_obs)
    # the same float32 rows through the same layers; only the matmul's blocking may differ
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()


def _f64(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def slow_appo_loss(model, batch, algo):
    """APPO's loss by per-step python sums, float64 (``model`` a float64 copy); the critic is run on
    every next observation. Returns float64 scalars named as ``appo_loss``'s; ``loss`` has its graph.

    Targets ``v_s`` and advantages ``A_s``, held constant, on rewards ``reward_scale * r_s``:
    V-trace's ``v_s`` (:func:`slow_vtrace_targets`) with ``A_s = r_s + gamma v'_{s+1} - V(x_s)``,
    ``v'_{s+1} = v_{s+1}`` inside the episode and unroll, else ``V(x_{s+1})`` (0 after a
    termination); or :func:`slow_gae`. With ``rho_s = pi(a_s|x_s) / mu(a_s|x_s)`` (PPO's ratio):

        L_clip = -1/n sum min(rho_s A_s, clip(rho_s, 1 - eps, 1 + eps) A_s)
        L_v    =  1/n sum (V(x_s) - v_s)^2 / 2;   H = 1/n sum H(pi(x_s))
        loss   = L_clip + value_coef L_v - entropy_coef H
        approx_kl = 1/n sum ((rho_s - 1) - log rho_s);  clip_fraction = 1/n #{|rho_s - 1| > eps}
    """
    B, T = batch.batch_size
    log_pi, log_mu, ratio, V, H, A, targets = [], [], [], [], [], [], []
    for b in range(B):
        logits, values = model(batch[keys.OBSERVATION][b].double())
        with torch.no_grad():
            V_next = model.value(batch[keys.NEXT_OBSERVATION][b].double())[:, 0].tolist()
        lp = torch.log_softmax(logits, -1)
        lp_a = [lp[t, batch[keys.ACTION][b, t]] for t in range(T)]
        mu = batch[keys.ACTION_LOG_PROB][b].double().tolist()
        rho = [math.exp(lp_a[t].item() - mu[t]) for t in range(T)]
        Vb = values[:, 0].tolist()
        r = [algo.reward_scale * x for x in batch[keys.REWARD][b, :, 0].tolist()]
        done, term = batch[keys.DONE][b, :, 0].tolist(), batch[keys.TERMINATED][b, :, 0].tolist()
        if algo.vtrace:
            v = slow_vtrace_targets(algo.gamma, rho, Vb, V_next, r, done, term, algo.rho_bar, algo.c_bar)
            for s in range(T):
                v_next = V_next[s] if (done[s] or s == T - 1) else v[s + 1]
                A.append(r[s] + algo.gamma * (0.0 if term[s] else v_next) - Vb[s])
            targets += v
        else:
            adv, target = slow_gae(algo.gamma, algo.gae_lambda, Vb, V_next, r, done, term)
            A += adv
            targets += target
        log_pi += lp_a
        log_mu += mu
        ratio += rho
        V += [values[t, 0] for t in range(T)]
        H += [-(lp[t].exp() * lp[t]).sum() for t in range(T)]
    n, eps = len(A), algo.clip_eps
    mean_A = sum(A) / n
    std_A = math.sqrt(sum((a - mean_A) ** 2 for a in A) / (n - 1))
    if algo.normalize_advantage:
        A = [(a - mean_A) / (std_A + 1e-8) for a in A]
    L_clip = 0.0
    for s in range(n):
        rho_s = (log_pi[s] - log_mu[s]).exp()  # with its graph through log pi
        L_clip = L_clip - torch.minimum(rho_s * A[s], rho_s.clamp(1 - eps, 1 + eps) * A[s]) / n
    L_v = sum((V[s] - targets[s]) ** 2 / 2 for s in range(n)) / n
    H_mean = sum(H) / n
    return {
        "loss": L_clip + algo.value_coef * L_v - algo.entropy_coef * H_mean,
        "loss_policy": L_clip,
        "loss_value": L_v,
        "entropy": H_mean,
        "approx_kl": _f64(sum((x - 1) - math.log(x) for x in ratio) / n),
        "clip_fraction": _f64(sum(abs(x - 1) > eps for x in ratio) / n),
        "advantage_std": _f64(std_A),
        "value_mean": _f64(sum(x.item() for x in V) / n),
    }


def appo_batch(model, B=4, T=6, F=2, seed=0, log_ratio=0.0) -> TensorDict:
    """Whole unrolls as a rollout worker writes them: ``next.observation[:, t]`` is
    ``observation[:, t+1]`` except at episode ends and the last step. Episode ends: a termination
    at (0, 2), a truncation at (1, 3), a termination at the unroll's last step (2, T-1). Behaviour
    log-probs are the model's plus ``U(-log_ratio, log_ratio)``."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(B, T, F, generator=g)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    term = torch.zeros(B, T, 1, dtype=torch.bool)
    for b, t, is_term in ((0, 2, True), (1, 3, False), (2, T - 1, True)):
        done[b, t], term[b, t] = True, is_term
    next_obs = torch.cat([obs[:, 1:], torch.zeros(B, 1, F)], dim=1)
    fresh = done[..., 0].clone()
    fresh[:, -1] = True
    next_obs[fresh] = torch.randn(int(fresh.sum()), F, generator=g)  # true final observations
    with torch.no_grad():
        logp = torch.log_softmax(model.policy(obs), -1)
    action = torch.randint(0, logp.shape[-1], (B, T), generator=g)
    log_mu = logp.gather(-1, action.unsqueeze(-1)).squeeze(-1) + (torch.rand(B, T, generator=g) * 2 - 1) * log_ratio
    return TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: action,
            keys.ACTION_LOG_PROB: log_mu,
            keys.POLICY_VERSION: torch.zeros(B, T, dtype=torch.int64),
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: next_obs,
                    "reward": torch.randn(B, T, 1, generator=g),
                    "done": done,
                    "terminated": term,
                },
                batch_size=[B, T],
            ),
        },
        batch_size=[B, T],
    )


def sharpened_model(obs_dim: int, num_actions: int, seed: int) -> ActorCritic:
    """An ``ActorCritic`` whose policy head is not shrunk to near-uniform (so the entropy term has a
    gradient and behaviour/target ratios spread)."""
    torch.manual_seed(seed)
    model = ActorCritic(obs_dim, num_actions)
    with torch.no_grad():
        model.policy[-1].weight.mul_(100.0)
        model.policy[-1].bias.normal_()
    return model


@pytest.mark.parametrize("vtrace,normalize", [(True, False), (True, True), (False, False)])
def test_appo_loss_matches_a_slow_loop_off_policy(vtrace, normalize):
    """Every scalar ``appo_loss`` returns and the gradient of ``loss`` against :func:`slow_appo_loss`
    (float64; autograd of the hand-written loss), on lagged data: ratios pi/mu over [0.55, 1.8],
    so PPO's clip acts on both sides and V-trace's ``rho_bar = 1.1`` and ``c_bar = 0.95`` both clip
    and differ (swapping them changes the targets); terminations and a truncation inside the
    unroll and at its end; ``reward_scale`` 0.5; with and without advantage normalisation; and
    GAE in place of V-trace.

    Tolerances: float32 against float64 a few hundred ops deep, rtol 1e-5 and atol 1e-6 on O(1)
    values."""
    algo = override(
        debug(),
        **{
            "algo.vtrace": vtrace,
            "algo.normalize_advantage": normalize,
            "algo.rho_bar": 1.1,
            "algo.c_bar": 0.95,
            "algo.reward_scale": 0.5,
            "algo.entropy_coef": 0.1,
        },
    ).algo
    model = sharpened_model(2, 3, seed=0)
    batch = appo_batch(model, log_ratio=0.6)
    ratio = (
        (
            torch.log_softmax(model.policy(batch[keys.OBSERVATION]), -1)
            .gather(-1, batch[keys.ACTION].unsqueeze(-1))
            .squeeze(-1)
            - batch[keys.ACTION_LOG_PROB]
        )
        .exp()
        .detach()
    )
    assert (ratio > 1 + algo.clip_eps).any() and (ratio < 1 - algo.clip_eps).any()
    assert ((ratio > algo.c_bar) & (ratio < algo.rho_bar)).any()
    out = appo_loss(model, batch, algo)
    grads = torch.autograd.grad(out["loss"], list(model.parameters()))

    model64 = copy.deepcopy(model).double()
    want = slow_appo_loss(model64, batch, algo)
    expected = torch.autograd.grad(want["loss"], list(model64.parameters()))
    assert set(out.keys()) == set(want)
    for name, w in want.items():
        torch.testing.assert_close(
            out[name].double(), w.detach(), rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}"
        )
    for got, w in zip(grads, expected):
        torch.testing.assert_close(got.double(), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("vtrace", [True, False])
def test_appo_loss_on_policy(vtrace):
    """On-policy data (behaviour = target): PPO's ratio is 1 and nothing is clipped; with V-trace
    the value loss regresses on the plain n-step returns ``R_s = sum_{k>=s} gamma^{k-s} r_k +
    gamma^{T-s} V(x_T)`` (a python loop here; no episode ends), at every step of the unroll."""
    algo = override(debug(), **{"algo.vtrace": vtrace}).algo
    model = ActorCritic(2, 3)
    B, T = 4, 5
    obs = torch.randn(B, T, 2)
    with torch.no_grad():
        logp = torch.log_softmax(model.policy(obs), -1)
    action = torch.randint(0, 3, (B, T))
    flags = torch.zeros(B, T, 1, dtype=torch.bool)
    next_obs = torch.cat([obs[:, 1:], torch.randn(B, 1, 2)], dim=1)  # no episode ends: the next step's
    batch = TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: action,
            keys.ACTION_LOG_PROB: logp.gather(-1, action.unsqueeze(-1)).squeeze(-1),
            keys.POLICY_VERSION: torch.zeros(B, T, dtype=torch.int64),
            keys.NEXT: TensorDict(
                {keys.OBSERVATION: next_obs, "reward": torch.randn(B, T, 1), "done": flags, "terminated": flags},
                batch_size=[B, T],
            ),
        },
        batch_size=[B, T],
    )
    out = appo_loss(model, batch, algo)
    out["loss"].backward()
    assert out["clip_fraction"] == 0 and out["approx_kl"].abs() < 1e-6
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    if vtrace:  # rho = 1 everywhere: V-trace's targets are the plain n-step returns
        with torch.no_grad():
            V = model.value(obs)[..., 0].double()
            V_T = model.value(next_obs[:, -1])[..., 0].double()
        r = batch[keys.REWARD][..., 0].double() * algo.reward_scale
        loss_value = 0.0
        for b in range(B):
            for s in range(T):
                R = (
                    sum(algo.gamma ** (k - s) * r[b, k].item() for k in range(s, T))
                    + algo.gamma ** (T - s) * V_T[b].item()
                )
                loss_value += (R - V[b, s].item()) ** 2 / 2 / (B * T)
        assert out["loss_value"].item() == pytest.approx(loss_value, rel=1e-5, abs=1e-7)


# ---------------------------------------------------------------- doorbells


def test_doorbell_records_arrive_whole_from_many_writers_and_replies_reach_their_worker(tmp_path):
    bell.make(tmp_path, 0, [1], [2, 3])
    workers = [bell.WorkerBell(tmp_path, 1, w) for w in (2, 3)]  # opened before the reader: no order needed
    server = bell.ServerBell(tmp_path, 1, [2, 3])
    n = 2000  # 32 KB per writer: more than a pipe holds, so writers and the reader interleave

    def write(w):
        for i in range(n):
            while True:
                try:
                    w.ask(i % 2, i, i % 7)
                    break
                except BlockingIOError:  # the pipe is full until the reader catches up
                    time.sleep(0.001)

    threads = [threading.Thread(target=write, args=(w,)) for w in workers]
    for th in threads:
        th.start()
    got = []
    while len(got) < 2 * n:
        got += server.requests(timeout_s=5.0)
    for th in threads:
        th.join()
    for rank in (2, 3):
        mine = [r for r in got if r[0] == rank]
        assert mine == [(rank, i % 2, i, i % 7) for i in range(n)]  # whole, in order, none lost
    server.answer(3, 1, bell.OK)
    server.answer(3, 0, bell.STOP)
    server.answer(2, 0, bell.ERROR)
    server.answer(9, 0, bell.OK)  # no such worker: ignored
    never = lambda: False  # noqa: E731
    assert workers[1].wait(0, 1.0, never) == bell.STOP  # group 1's reply came first: kept for later
    assert workers[1].wait(1, 1.0, never) == bell.OK
    assert workers[0].wait(0, 1.0, never) == bell.ERROR
    server.answer(2, 1, 7)  # two replies to one group read in one go (a spare is read a hand-in late)
    server.answer(2, 1, 8)
    assert [workers[0].wait(1, 1.0, never) for _ in range(2)] == [7, 8]  # both, oldest first
    with pytest.raises(TimeoutError):
        workers[0].wait(1, 0.2, never)
    assert workers[0].wait(1, 5.0, lambda: True) is None  # the run's stop flag ends the wait at once
    for b in (*workers, server):
        b.close()


# ---------------------------------------------------------------- double buffering


class FakeLearnerAndInference:
    """Ranks 0 (learner) and 1 (inference) for one real rollout worker (rank 2): plain handlers
    over the local transport and a thread answering the worker's doorbells (actions, hand-ins),
    which check who writes what, and when."""

    def __init__(self, cfg, hub: LocalHub, hand_ins: int = 6, end_by: str = "stop"):
        a = cfg.algo
        self.shared, self.path = shm.create(rollout_layout(32, a.envs_per_group, a.unroll_length, 1, 1, 3), "test")
        bell.make(self.path, 0, [1], [2])
        self.traj = self.shared["traj"]
        self.pool, self.hand_ins, self.events, self.end_by = SlotPool(32), hand_ins, [], end_by
        self.violations: list[str] = []
        self.frozen: dict[int, TensorDict] = {}  # handed-in slots as they were handed in
        self.lock = threading.Lock()
        learner = hub.endpoint(0)
        learner.serve(
            "hello", lambda td: TensorDict({keys.SHM_PATH: shm.encode_path(self.path), keys.STOP: torch.tensor(False)})
        )
        learner.serve(
            "attached",
            lambda td: TensorDict(
                {keys.SLOT: torch.tensor([[self.pool.acquire(2), self.pool.acquire(2)] for _ in range(2)])}
            ),
        )
        learner.serve("bye", lambda td: TensorDict())
        learner.serve("time_budget", lambda td: TensorDict())
        self.bell, self.done = bell.ServerBell(self.path, 1, [2]), threading.Event()
        self.slot_bell = bell.ServerBell(self.path, 0, [2], bell.SLOT)
        self.server = threading.Thread(target=self.serve)
        self.server.start()

    def serve(self) -> None:
        while not self.done.is_set():
            for rank, g, s, t in self.bell.requests(0.05):
                self.infer(rank, g, s, t)
                self.bell.answer(rank, g, bell.OK)
            for rank, g, s, t in self.slot_bell.requests(0.0):
                self.hand_in(rank, g, s, t)

    def log(self, what: str, group: int) -> None:
        with self.lock:
            self.events.append((what, group))

    def infer(self, rank: int, g: int, s: int, t: int) -> None:
        if rank != 2 or self.pool.owner[s] != 2:
            self.violations.append(f"infer on slot {s} that the worker does not own")
        self.log("infer_start", g)
        step = self.traj[s, :, t].clone()
        time.sleep(0.01)  # long enough for the other group to step meanwhile
        if not (self.traj[s, :, t] == step).all():
            self.violations.append(f"slot {s} step {t} written while inference read it")
        self.traj[keys.ACTION][s, :, t] = (self.traj[keys.OBSERVATION][s, :, t, 0] > 0).long()
        self.log("infer_end", g)

    def hand_in(self, rank: int, g: int, s: int, t: int) -> None:
        if rank != 2 or t != self.traj.shape[2]:
            self.violations.append(f"slot {s} handed in by rank {rank} after {t} steps")
        self.pool.hand_in(2, s)
        self.frozen[s] = self.traj[s].clone()
        self.hand_ins -= 1
        if self.hand_ins <= 0 and self.end_by == "stop":
            self.shared["control"][STOP] = 1
        elif self.hand_ins <= 0:  # the learner declared rank 2 lost (a stopped worker that came back)
            self.shared["evicted"][2] = 1
        self.slot_bell.answer(2, g, self.pool.acquire(2))  # the group's next spare


@pytest.mark.timeout(60)
@pytest.mark.parametrize("end_by", ["stop", "evicted"])
def test_double_buffering_steps_one_group_while_the_other_waits_and_never_writes_a_read_slot(end_by, monkeypatch):
    import distrl.recipes.sf.rollout_worker as sfw

    cfg = override(debug(), **{"algo.envs_per_worker": 8, "algo.unroll_length": 4})
    roles = dict(enumerate(get_recipe("sf").roles_for_config(3, cfg)))
    hub = LocalHub(3)
    fake = FakeLearnerAndInference(cfg, hub, end_by=end_by)
    made, make = [], sfw.make_vector_env

    def logged_env(*args):  # the worker's vector envs, with each step logged per group
        env, g = make(*args), len(made)
        made.append(env)
        step = env.step
        env.step = lambda a: (fake.log("env_step", g), step(a))[1]
        return env

    monkeypatch.setattr(sfw, "make_vector_env", logged_env)
    ask = bell.WorkerBell.ask

    def logged_ask(self, group, slot, t):
        fake.log("send", group)
        ask(self, group, slot, t)

    monkeypatch.setattr(bell.WorkerBell, "ask", logged_ask)
    endpoint = hub.endpoint(2)
    try:
        worker = sfw.SFRolloutWorker(RoleContext(cfg, endpoint, 2, roles, Path(".")))
        thread = threading.Thread(target=worker.run)
        thread.start()
        thread.join(30)
        assert not thread.is_alive()  # it saw the stop flag, or its eviction, and left
    finally:
        monkeypatch.undo()
        fake.done.set()
        fake.server.join(5)
        fake.bell.close()
        fake.slot_bell.close()
        shm.unlink(fake.path)
    assert fake.hand_ins <= 0 and not fake.violations, fake.violations
    for s, frozen in fake.frozen.items():  # handed in, never freed: never written again
        assert (fake.traj[s] == frozen).all(), f"slot {s} written after it was handed in"
    # while a group's request is in flight (sent, its actions not yet used to step its envs), the
    # worker steps the other group: the schedule itself, logged in the worker's own thread
    overlapped = requests = 0
    events = [e for e in fake.events if e[0] in ("send", "env_step")]
    for i, (what, g) in enumerate(events):
        if what == "send":
            end = next((j for j in range(i, len(events)) if events[j] == ("env_step", g)), None)
            if end is None:  # still in flight when the worker stopped
                continue
            requests += 1
            overlapped += ("env_step", 1 - g) in events[i:end]
    assert requests >= 12 and overlapped >= requests - 1, (overlapped, requests)  # all but group 0's first


# ---------------------------------------------------------------- the learner's hand-in


def test_hand_ins_come_through_the_doorbell_and_spares_go_back_as_slots_come_free(tmp_path):
    """A real learner's loop reads hand-ins from its doorbell, copies the oldest slot out when it
    needs rows (as handed in; the episode returns read where ``done``), frees it, and answers the
    group owed a spare first; while every slot is taken the next group waits (backpressure). A
    hand-in of a worker declared lost is ignored: its slots were reclaimed."""
    from distrl.recipes.sf.learner import SFLearner

    cfg = override(debug(), **{"run.logger": "none"})  # 2 groups of 8 envs, 4 steps, batch_size 16 rows
    roles = dict(enumerate(get_recipe("sf").roles_for_config(3, cfg)))  # learner, inference, worker
    learner = SFLearner(RoleContext(cfg, LocalHub(3).endpoint(0), 0, roles, tmp_path))
    worker = bell.WorkerBell(learner.shm_path, 0, 2, bell.SLOT)
    try:
        me = TensorDict({keys.WORKER_RANK: torch.tensor(2)})
        slots = learner._attached(me)[keys.SLOT].flatten().tolist()  # every slot is the worker's
        assert sorted(slots) == list(range(len(learner.pool.owner)))
        traj, T = learner.traj, cfg.algo.unroll_length
        for g, s in enumerate(slots[:2]):
            traj[keys.OBSERVATION][s] = float(s + 1)
            traj[keys.DONE][s, 3, 1] = True  # an episode of env 3 ended at step 1, with return 40 + s
            traj[keys.NEXT, keys.EPISODE_RETURN][s, 3, 1] = 40.0 + s
            traj[keys.NEXT, keys.EPISODE_RETURN][s, 4, 1] = 99.0  # not done: not a return
            worker.ask(g, s, T)
        never = lambda: False  # noqa: E731
        assert learner._take_slot()
        assert worker.wait(0, 1.0, never) == slots[0]  # group 0 was owed first: its slot came free
        traj[keys.OBSERVATION][slots[0]] = -1.0  # its new owner writes it: the copy stays as handed in
        assert learner.pool.owner[slots[1]] == SlotPool.LEARNER
        with pytest.raises(TimeoutError):  # no slot is free: group 1 waits for its spare
            worker.wait(1, 0.3, never)
        assert learner._take_slot()
        assert worker.wait(1, 1.0, never) == slots[1]
        obs = learner.rows.take(len(learner.rows))[keys.OBSERVATION]  # two slots' rows, oldest first
        taken = [half.unique().tolist() for half in obs.chunk(2)]
        assert taken == [[float(s + 1)] for s in slots[:2]]  # as handed in, in order
        assert learner.session.tracker.episodes == 2
        assert sorted(learner.session.tracker.returns) == [40.0 + s for s in sorted(slots[:2])]
        worker.ask(0, slots[2], T)  # then rank 2 is declared lost: its slots go back to the pool
        learner.evicted[2] = 1
        learner.pool.reclaim(2)
        assert not learner._take_slot() and not learner.handed and not learner.owed
    finally:
        worker.close()
        learner.bell.close()
        learner._maybe_unlink(force=True)
