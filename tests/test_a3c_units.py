"""The parameter server driven by hand over the local transport: staleness accounting, the
staleness cap, arrival order, the A2C switch (one mean per round) and a dead worker in a round."""
from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from torch.nn.utils import parameters_to_vector

from distrl.architectures import get_recipe
from distrl.architectures.base import RoleContext
from distrl.config import override
from distrl.data import keys
from distrl.models import clip_towers
from distrl.roles.a3c_worker import A3CWorker
from distrl.roles.parameter_server import ParameterServer, make_optimizer
from distrl.transport.local import LocalHub

ROLES = {0: "parameter_server", 1: "worker", 2: "worker"}


@pytest.fixture
def make_server(tmp_path):
    made = []

    def make(**changes):
        cfg = override(get_recipe("a3c").default_config(),
                       **{"run.env": "distrl/MatchSign-v0", "run.logger": "none", "run.eval_episodes": 2, **changes})
        hub = LocalHub(3)
        run_dir = tmp_path / f"run{len(made)}"
        run_dir.mkdir()
        server = ParameterServer(RoleContext(cfg, hub.endpoint(0), 0, ROLES, run_dir))
        made.append(server)
        return server

    yield make
    for s in made:
        if s.session.tracker.writer is not None:
            s.session.tracker.writer.close()


def gradient_msg(server: ParameterServer, rank: int, version: int, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict({
        keys.GRADIENT: torch.randn(server.num_params, generator=g), keys.POLICY_VERSION: torch.tensor(version),
        keys.FRAMES: torch.tensor(10), keys.WORKER_RANK: torch.tensor(rank),
        keys.EPISODE_RETURNS: torch.tensor([3.0]), keys.EPISODE_LENGTHS: torch.tensor([20]),
        keys.WORKER_STATS: TensorDict(entropy=torch.tensor(0.5)),
    })


def step(server: ParameterServer) -> None:
    """One iteration of the server's loop (what ``LearnerSession.train`` runs)."""
    batch = server.next_gradients()
    if batch is not None:
        server.apply(batch)


def test_staleness_is_counted_per_applied_gradient_and_the_cap_drops(make_server):
    server = make_server(**{"algo.max_staleness": 1})
    for rank, version in ((1, 0), (2, 0), (1, 1), (2, 0)):  # arrival order; the last one is 3 updates old
        server._push(gradient_msg(server, rank, version))
    order = []
    for _ in range(4):
        batch = server.next_gradients()
        order.append((int(batch[0][keys.WORKER_RANK]), int(batch[0][keys.POLICY_VERSION])))
        server.apply(batch)
    assert order == [(1, 0), (2, 0), (1, 1), (2, 0)]  # applied one by one, in arrival order
    s = server.staleness_summary()
    # server versions at apply: 0, 1, 2, then 3 for a version-0 gradient: 3 > cap, dropped
    assert s["staleness_hist"] == {"0": 1, "1": 2} and s["staleness_max"] == 1
    assert s["gradients_applied"] == 3 and s["dropped_stale_gradients"] == 1
    assert server.version == 3 and server.session.tracker.env_frames == 40  # dropped frames still count
    assert server.session.tracker.episodes == 4


def test_replies_carry_parameters_only_when_newer(make_server):
    server = make_server()
    pull = lambda v: server._pull(TensorDict({keys.WORKER_RANK: torch.tensor(1), keys.POLICY_VERSION: torch.tensor(v)}))  # noqa: E731
    first = pull(-1)
    assert int(first[keys.POLICY_VERSION]) == 0 and not bool(first[keys.STOP])
    torch.testing.assert_close(first[keys.PARAMS], parameters_to_vector(server.params).detach())
    assert keys.PARAMS not in pull(0).keys()
    server._push(gradient_msg(server, 1, 0))
    step(server)
    assert int(pull(0)[keys.POLICY_VERSION]) == 1 and keys.PARAMS in pull(0).keys()


def test_a2c_applies_the_mean_of_one_gradient_per_live_worker(make_server):
    server = make_server(**{"algo.sync": True})
    model0, optim0 = copy.deepcopy(server.model), None
    optim0 = make_optimizer(list(model0.parameters()), server.algo)
    a, b = gradient_msg(server, 1, 0, seed=1), gradient_msg(server, 2, 0, seed=2)
    server._push(a)
    assert server.next_gradients() is None  # rank 2 has not sent its gradient of version 0
    server._push(b)
    batch = server.next_gradients()
    assert sorted(int(m[keys.WORKER_RANK]) for m in batch) == [1, 2]
    server.apply(batch)
    # the same step by hand: mean, clip, one optimizer step
    mean = (a[keys.GRADIENT] + b[keys.GRADIENT]) / 2
    offset = 0
    for p in model0.parameters():
        p.grad = mean[offset:offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    clip_towers(model0.tower_parameters(), server.algo.max_grad_norm)
    optim0.step()
    torch.testing.assert_close(parameters_to_vector(server.params), parameters_to_vector(model0.parameters()))
    assert server.version == 1 and server.staleness_summary()["staleness_hist"] == {"0": 2}

    # rank 2 dies: the next round closes on rank 1's gradient alone, and rank 2 is told to stop
    server.ctx.transport.mark_lost(2, "killed")
    server._push(gradient_msg(server, 1, 1))
    assert len(server.next_gradients()) == 1
    assert bool(server._push(gradient_msg(server, 2, 1))[keys.STOP])
    assert server.queue.empty()  # the lost rank's late gradient was not queued


def test_malformed_gradients_are_rejected_and_counted(make_server):
    server = make_server()
    bad = gradient_msg(server, 1, 0)
    bad[keys.GRADIENT] = torch.zeros(3, dtype=torch.float64)
    server._push(bad)
    assert server.queue.empty() and server.session.tracker.counters["rejected_gradients"] == 1


def test_worker_gradient_is_the_loss_gradient_at_the_pulled_version(make_server, tmp_path):
    server = make_server()
    worker = A3CWorker(RoleContext(server.cfg, server.ctx.transport.hub.endpoint(1), 1, ROLES, tmp_path))
    assert not worker._pull() and worker.version == 0
    torch.testing.assert_close(parameters_to_vector(worker.params), parameters_to_vector(server.params))
    msg = worker.gradient(*worker.act())
    assert msg[keys.GRADIENT].shape == (server.num_params,) and int(msg[keys.POLICY_VERSION]) == 0
    assert int(msg[keys.FRAMES]) == server.algo.envs_per_worker * server.algo.t_max
    assert set(keys.A3C_IN_KEYS) <= set(worker.runner.unroll(worker._act, 2)[0].keys(include_nested=True, leaves_only=True))
    server._push(msg)
    step(server)
    assert server.version == 1
    worker.runner.close()
