"""The parameter server driven by hand over the local transport: staleness accounting, the
staleness cap, arrival order, the A2C switch (one mean per round, its update against clipping and
RMSProp/Adam written out by hand) and a dead worker in a round; a worker's pushed gradient against
autograd of the A3C loss written step by step."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tensordict import TensorDict
from torch.nn.utils import parameters_to_vector

from distrl.recipes import get_recipe
from distrl.runtime.context import RoleContext
from distrl.config import override
from distrl.data import keys
from distrl.recipes.a3c.worker import A3CWorker
from distrl.recipes.a3c.parameter_server import ParameterServer
from distrl.transport.local import LocalHub

ROLES = {0: "parameter_server", 1: "worker", 2: "worker"}


@pytest.fixture
def make_server(tmp_path):
    made, hubs = [], []

    def make(base=None, **changes):
        """A server of ``base`` (default: a3c's default config on the toy env) with ``changes``."""
        if base is None:
            base = override(get_recipe("a3c").default_config(), **{"run.env": "distrl/MatchSign-v0"})
        cfg = override(base, **{"run.logger": "none", "run.eval_episodes": 2, **changes})
        hub = LocalHub(3)
        hubs.append(hub)
        run_dir = tmp_path / f"run{len(made)}"
        run_dir.mkdir()
        server = ParameterServer(RoleContext(cfg, hub.endpoint(0), 0, ROLES, run_dir))
        made.append(server)
        return server

    yield make
    for s in made:
        if s.session.tracker.writer is not None:
            s.session.tracker.writer.close()
    for hub in hubs:  # the calls' thread pool: no thread outlives the test
        hub.pool.shutdown(wait=True, cancel_futures=True)


def gradient_msg(server: ParameterServer, rank: int, version: int, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            keys.GRADIENT: torch.randn(server.num_params, generator=g),
            keys.POLICY_VERSION: torch.tensor(version),
            keys.FRAMES: torch.tensor(10),
            keys.WORKER_RANK: torch.tensor(rank),
            keys.EPISODE_RETURNS: torch.tensor([3.0]),
            keys.EPISODE_LENGTHS: torch.tensor([20]),
            keys.WORKER_STATS: TensorDict(entropy=torch.tensor(0.5)),
        }
    )


def step(server: ParameterServer) -> None:
    """One iteration of the server's loop (what ``LearnerSession.train`` runs)."""
    batch = server.next_batch()
    if batch is not None:
        server.update(batch)


def test_staleness_is_counted_per_applied_gradient_and_the_cap_drops(make_server):
    server = make_server(**{"algo.max_staleness": 1})
    for rank, version in ((1, 0), (2, 0), (1, 1), (2, 0)):  # arrival order; the last one is 3 updates old
        server._push(gradient_msg(server, rank, version))
    order = []
    for _ in range(4):
        batch = server.next_batch()
        order.append((int(batch[0][keys.WORKER_RANK]), int(batch[0][keys.POLICY_VERSION])))
        server.update(batch)
    assert order == [(1, 0), (2, 0), (1, 1), (2, 0)]  # applied one by one, in arrival order
    s = server.summary_extra()
    # server versions at apply: 0, 1, 2, then 3 for a version-0 gradient: 3 > cap, dropped
    assert s["staleness_hist"] == {"0": 1, "1": 2} and s["staleness_max"] == 1
    assert s["gradients_applied"] == 3 and s["dropped_stale_gradients"] == 1
    # the frames counted are those of the applied gradients; the dropped one's are reported apart
    assert server.version == 3 and server.session.tracker.env_frames == 30
    assert server.session.tracker.frames_dropped == 10
    assert server.session.tracker.episodes == 4


def test_replies_carry_parameters_only_when_newer(make_server):
    server = make_server()
    pull = lambda v: server._pull(TensorDict({keys.WORKER_RANK: torch.tensor(1), keys.POLICY_VERSION: torch.tensor(v)}))  # noqa: E731
    first = pull(-1)
    assert int(first[keys.PARAMS_VERSION]) == 0 and not bool(first[keys.STOP])
    torch.testing.assert_close(first[keys.PARAMS], parameters_to_vector(server.params).detach())
    assert keys.PARAMS not in pull(0).keys()
    server._push(gradient_msg(server, 1, 0))
    step(server)
    assert int(pull(0)[keys.PARAMS_VERSION]) == 1 and keys.PARAMS in pull(0).keys()


def clipped_by_tower(grad: torch.Tensor, tower: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``grad [P]`` with each tower's part scaled by ``min(1, max_norm / (||g_tower||_2 + 1e-6))``
    (``torch.nn.utils.clip_grad_norm_``'s rule, applied per tower); ``tower [P]`` holds 0 for the
    policy's entries and 1 for the value's."""
    out = grad.clone()
    for k in (0, 1):
        part = grad[tower == k]
        norm = math.sqrt(sum(x * x for x in part.tolist()))
        out[tower == k] = part * min(1.0, max_norm / (norm + 1e-6))
    return out


class HandOptimizer:
    """The optimizer's update written out, float64, flat ``[P]`` (torch's documented rules, no
    weight decay or momentum):

    - rmsprop: ``v <- alpha v + (1 - alpha) g^2``; ``theta <- theta - lr g / (sqrt(v) + eps)``
    - adam (betas 0.9, 0.999): ``m <- b1 m + (1 - b1) g``; ``v <- b2 v + (1 - b2) g^2``;
      ``theta <- theta - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``
    """

    def __init__(self, theta: torch.Tensor, algo):
        self.theta, self.algo, self.t = theta.double().clone(), algo, 0
        self.m, self.v = torch.zeros_like(self.theta), torch.zeros_like(self.theta)

    def step(self, g: torch.Tensor) -> None:
        a, self.t = self.algo, self.t + 1
        if a.optimizer == "rmsprop":
            self.v = a.rmsprop_alpha * self.v + (1 - a.rmsprop_alpha) * g * g
            self.theta = self.theta - a.lr * g / (self.v.sqrt() + a.optim_eps)
        else:
            b1, b2 = 0.9, 0.999
            self.m = b1 * self.m + (1 - b1) * g
            self.v = b2 * self.v + (1 - b2) * g * g
            m_hat, v_hat = self.m / (1 - b1**self.t), self.v / (1 - b2**self.t)
            self.theta = self.theta - a.lr * m_hat / (v_hat.sqrt() + a.optim_eps)


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
def test_a2c_applies_the_mean_of_one_gradient_per_live_worker(make_server, optimizer):
    """Two A2C rounds against the update written out by hand (:func:`clipped_by_tower`,
    :class:`HandOptimizer`, float64), from a copy of the server's starting parameters: each round
    applies the mean of the workers' gradients, clipped per tower, through one optimizer state
    that carries over between rounds. Round 1's tower norms (~60) are clipped to 0.5; round 2's
    gradients are scaled so one tower is under the cap and one over. Then a dead worker: the next
    round closes without it.

    Tolerance: the server's float32 parameters are rounded to ~6e-8 of their size at each of the
    two steps (rtol 1e-6); the steps themselves (~lr = 7e-4) are exact to far below atol 1e-8. A
    missing clip or a wrong epsilon moves a step by ~1e-4."""
    server = make_server(**{"algo.sync": True, "algo.optimizer": optimizer})
    theta0 = parameters_to_vector(server.params).detach().clone()
    tower = torch.cat(
        [
            torch.full((p.numel(),), 0 if name.startswith("policy.") else 1)
            for name, p in server.model.named_parameters()
        ]
    )
    assert int((tower == 0).sum()) and int((tower == 1).sum())
    hand = HandOptimizer(theta0, server.algo)
    for version, policy_scale, value_scale in ((0, 1.0, 1.0), (1, 1e-3, 0.5)):
        a, b = (
            gradient_msg(server, 1, version, seed=2 * version + 1),
            gradient_msg(server, 2, version, seed=2 * version + 2),
        )
        for m in (a, b):  # round 2: the policy tower's norm ~0.07 < 0.5, the value tower's ~30
            m[keys.GRADIENT] = torch.where(tower == 0, policy_scale, value_scale) * m[keys.GRADIENT]
        server._push(a)
        assert server.next_batch() is None  # rank 2 has not sent its gradient of this version
        server._push(b)
        batch = server.next_batch()
        assert sorted(int(m[keys.WORKER_RANK]) for m in batch) == [1, 2]
        server.update(batch)
        mean = (a[keys.GRADIENT].double() + b[keys.GRADIENT].double()) / 2
        hand.step(clipped_by_tower(mean, tower, server.algo.max_grad_norm))
        torch.testing.assert_close(
            parameters_to_vector(server.params).detach().double(), hand.theta, rtol=1e-6, atol=1e-8
        )
        assert server.version == version + 1
    assert server.summary_extra()["staleness_hist"] == {"0": 4}
    assert not torch.allclose(hand.theta, theta0.double())  # the parameters did move

    # rank 2 dies: the next round closes on rank 1's gradient alone, and rank 2 is told to stop
    server.ctx.transport.mark_lost(2, "killed")
    server._push(gradient_msg(server, 1, 2))
    assert len(server.next_batch()) == 1
    assert bool(server._push(gradient_msg(server, 2, 2))[keys.STOP])
    assert server.queue.empty()  # the lost rank's late gradient was not queued


def test_malformed_gradients_are_rejected_and_counted(make_server):
    server = make_server()
    bad = gradient_msg(server, 1, 0)
    bad[keys.GRADIENT] = torch.zeros(3, dtype=torch.float64)
    server._push(bad)
    assert server.queue.empty() and server.session.tracker.counters["rejected_gradients"] == 1


def slow_returns(gamma, V_next, r, done, term):
    """``R_i`` of one env's segment by Mnih et al. (2016), Algorithm S3's backward loop (lists of
    length T): ``R = 0`` after a termination, ``V(s'_i)`` at a truncation and at the segment's end,
    then ``R <- r_i + gamma R``."""
    T = len(r)
    R, out = None, [0.0] * T
    for i in reversed(range(T)):
        if i == T - 1 or done[i]:
            R = 0.0 if term[i] else V_next[i]
        R = r[i] + gamma * R
        out[i] = R
    return out


def slow_a3c_objective(model, traj, algo):
    """The A3C loss of segment ``traj`` under ``model`` (a float64 copy), step by step:
    ``1/n sum_i [-A_i log pi(a_i|s_i) + value_coef (R_i - V(s_i))^2 / 2 - entropy_coef H(pi(s_i))]``,
    ``A_i = R_i - V(s_i)`` held constant, rewards times ``reward_scale``; ``n = B T``."""
    B, T = traj.batch_size
    total = 0.0
    for b in range(B):
        logits, V = model(traj[keys.OBSERVATION][b].double())
        with torch.no_grad():
            V_next = model.value(traj[keys.NEXT_OBSERVATION][b].double())[:, 0].tolist()
        r = [algo.reward_scale * x for x in traj[keys.REWARD][b, :, 0].tolist()]
        R = slow_returns(
            algo.gamma, V_next, r, traj[keys.DONE][b, :, 0].tolist(), traj[keys.TERMINATED][b, :, 0].tolist()
        )
        for i in range(T):
            log_pi = torch.log_softmax(logits[i], -1)
            H = -(log_pi.exp() * log_pi).sum()
            A = R[i] - V[i, 0].item()
            total = (
                total
                - A * log_pi[traj[keys.ACTION][b, i]]
                + algo.value_coef * (R[i] - V[i, 0]) ** 2 / 2
                - algo.entropy_coef * H
            )
    return total / (B * T)


def test_worker_gradient_is_the_loss_gradient_at_the_pulled_version(make_server, tmp_path):
    """The flat gradient a worker pushes equals ``torch.autograd.grad`` of the A3C loss written out
    step by step (:func:`slow_a3c_objective`, float64) at the parameters it pulled, on the segment it
    acted, in the server's parameter order; an episode end (a truncation at step 20) lies inside the
    segment, and the policy head is sharpened so the entropy term moves the gradient. Then the
    push is applied at version 0 -> 1.

    Tolerance: float32 against float64 over 36 steps; rtol 1e-5 with atol 1e-6."""
    server = make_server(**{"algo.envs_per_worker": 3, "algo.t_max": 12, "algo.entropy_coef": 0.05})
    with torch.no_grad():
        server.model.policy[-1].weight.mul_(100.0)
        server.model.policy[-1].bias.normal_()
    server.board.publish(server.version)
    worker = A3CWorker(RoleContext(server.cfg, server.ctx.transport.hub.endpoint(1), 1, ROLES, tmp_path))
    assert not worker._pull() and worker.version == 0
    torch.testing.assert_close(parameters_to_vector(worker.params), parameters_to_vector(server.params))
    worker.act()  # steps 0-11 of every episode; the next segment holds the truncation at step 20
    traj, returns, lengths = worker.act()
    assert traj[keys.DONE].any()
    msg = worker.gradient(traj, returns, lengths)

    model64 = copy.deepcopy(server.model).double()
    expected = torch.autograd.grad(slow_a3c_objective(model64, traj, server.algo), list(model64.parameters()))
    torch.testing.assert_close(
        msg[keys.GRADIENT].double(), torch.cat([g.reshape(-1) for g in expected]), rtol=1e-5, atol=1e-6
    )
    assert int(msg[keys.POLICY_VERSION]) == 0
    assert int(msg[keys.FRAMES]) == server.algo.envs_per_worker * server.algo.t_max
    assert set(keys.A3C_IN_KEYS) <= set(traj.keys(include_nested=True, leaves_only=True))
    server._push(msg)
    step(server)
    assert server.version == 1
    worker.runner.close()
