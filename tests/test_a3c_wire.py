"""A3C's bytes on the wire: the ``minatar`` preset's push and reply against the issue's bound (the
observation's own bytes plus 64 per env step), built from the real server, worker, network and
envs; and ``algo.wire_dtype`` bfloat16: the server widens each gradient and updates in float32,
and a worker's round trip (parameters in, gradient out) is off by no more than bfloat16's rounding."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from torch.nn.utils import parameters_to_vector

from distrl.config import override
from distrl.data import keys
from distrl.recipes.a3c import recipe as a3c
from distrl.recipes.a3c.parameter_server import ParameterServer
from distrl.recipes.a3c.worker import A3CWorker
from distrl.runtime.context import RoleContext
from references import slow_a3c_loss
from test_a3c_units import make_server  # noqa: F401  (the fixture, used by name)

ROLES = {0: "parameter_server", 1: "worker", 2: "worker"}
WIRE_OVERHEAD = 64  #: the issue's allowance per env step above the observation's own bytes
#: bfloat16 keeps 8 significant bits: round to nearest is off by at most 2^-8 of the value (unit
#: roundoff, half of ``torch.finfo(torch.bfloat16).eps``); the 1e-38 covers subnormals
BF16_ROUNDOFF = 2.0**-8


# make_server(cfg): the parameter server fixture of test_a3c_units, on the given config


def worker_of(server: ParameterServer, tmp_path) -> A3CWorker:
    return A3CWorker(RoleContext(server.cfg, server.ctx.transport.hub.endpoint(1), 1, ROLES, tmp_path))


def step(server: ParameterServer) -> None:
    """One iteration of the server's loop."""
    batch = server.next_batch()
    if batch is not None:
        server.update(batch)


def gradient_msg(server: ParameterServer, rank: int, version: int, grad: torch.Tensor | None = None) -> TensorDict:
    """A push as a worker sends it; ``grad`` defaults to ones in the server's wire dtype."""
    grad = torch.ones(server.num_params, dtype=server.wire_dtype) if grad is None else grad
    return TensorDict(
        {
            keys.GRADIENT: grad,
            keys.POLICY_VERSION: torch.tensor(version),
            keys.FRAMES: torch.tensor(24),
            keys.WORKER_RANK: torch.tensor(rank),
            keys.EPISODE_RETURNS: torch.tensor([1.0]),
            keys.EPISODE_LENGTHS: torch.tensor([5]),
            keys.WORKER_STATS: TensorDict(entropy=torch.tensor(0.5)),
        }
    )


def toy(**changes):
    return override(
        a3c.default(), **{"run.env": "distrl/MatchSign-v0", "algo.envs_per_worker": 3, "algo.t_max": 8, **changes}
    )


def test_defaults_keep_float32_on_the_wire():
    assert a3c.default().algo.wire_dtype == "float32" and a3c.debug().algo.wire_dtype == "float32"
    with pytest.raises(ValueError, match="wire_dtype"):
        override(a3c.default(), **{"algo.wire_dtype": "float16"})


@pytest.mark.timeout(120)
def test_minatar_push_and_reply_fit_the_observation_plus_64_bytes_per_env_step(make_server, tmp_path):
    """One push (the gradient of a full segment) and the reply that carries newer parameters back,
    as the meter counts them, per env step of the push: within the observation's bytes + 64."""
    server = make_server(a3c.minatar())
    worker = worker_of(server, tmp_path)
    try:
        assert not worker._pull() and worker.version == 0
        server._push(gradient_msg(server, rank=2, version=0))
        step(server)  # version 1: the worker's push (from version 0) gets the parameters back, the costly case
        traj, returns, lengths = worker.act()
        msg = worker.gradient(traj, returns, lengths)
        nbytes, frames = server.wire.bytes, server.wire.frames
        reply = server._push(msg)
        nbytes, frames = server.wire.bytes - nbytes, server.wire.frames - frames
    finally:
        worker.runner.close()
    assert keys.PARAMS in reply.keys() and int(reply[keys.PARAMS_VERSION]) == 1
    a = server.algo
    assert frames == int(msg[keys.FRAMES]) == a.envs_per_worker * a.t_max == traj.numel()
    obs = traj[keys.OBSERVATION][0, 0]
    obs_bytes = obs.numel() * obs.element_size()
    assert tuple(obs.shape) == (4, 10, 10) and obs_bytes == 400  # bool images
    per_step = nbytes / frames
    print(
        f"\nminatar: {server.num_params} parameters, {nbytes} bytes per push + reply, {frames} env steps: "
        f"{per_step:.1f} bytes per env step (bound {obs_bytes + WIRE_OVERHEAD})"
    )
    assert per_step <= obs_bytes + WIRE_OVERHEAD
    # the gradient and the parameters are nearly all of it, in bfloat16 both ways
    assert msg[keys.GRADIENT].dtype == reply[keys.PARAMS].dtype == torch.bfloat16
    assert nbytes - 2 * 2 * server.num_params < 0.01 * nbytes


def test_bfloat16_gradients_are_applied_in_float32(make_server):
    """Two servers from the same parameters, one taking bfloat16 gradients and one float32: given
    the same gradient (the float32 one holds the bfloat16 values widened), their updates agree bit
    for bit, and parameters, gradients and optimizer state stay float32."""
    wide, narrow = make_server(toy()), make_server(toy(**{"algo.wire_dtype": "bfloat16"}))
    narrow.model.load_state_dict(wide.model.state_dict())
    narrow.board.publish(narrow.version)
    g = torch.Generator().manual_seed(0)
    for version in range(3):
        grad = torch.randn(wide.num_params, generator=g).to(torch.bfloat16)
        for server, dtype in ((wide, torch.float32), (narrow, torch.bfloat16)):
            server._push(gradient_msg(server, 1, version, grad.to(dtype)))
            step(server)
    assert wide.version == narrow.version == 3
    assert torch.equal(parameters_to_vector(narrow.params), parameters_to_vector(wide.params))
    assert all(p.dtype == p.grad.dtype == torch.float32 for p in narrow.params)
    assert all(v.dtype == torch.float32 for s in narrow.optim.state.values() for v in s.values() if v.dim())
    # a float32 gradient where bfloat16 is expected is refused, not silently widened
    narrow._push(gradient_msg(narrow, 1, 3, torch.zeros(narrow.num_params)))
    assert narrow.queue.empty() and narrow.session.tracker.counters["rejected_gradients"] == 1


def test_bfloat16_round_trip_is_off_by_bfloat16_rounding_only(make_server, tmp_path):
    """A worker under ``wire_dtype`` bfloat16: its float32 parameters are the server's rounded to
    bfloat16 (each within 2^-8 of the server's), it acts and differentiates with exactly those, and
    the gradient it pushes is the gradient of A3C's loss at them, computed independently
    (:func:`slow_a3c_loss`: Algorithm S3's backward loop for the returns, the softmax's log-probability
    and entropy from their formulas, one step at a time, in float64), rounded to bfloat16: each
    element within 2^-8 of it, plus float32's own error in the worker's arithmetic (network, loss,
    backward: a few hundred roundings of 6e-8 at the worst, so 1e-5 of the largest element)."""
    server = make_server(toy(**{"algo.wire_dtype": "bfloat16"}))
    worker = worker_of(server, tmp_path)
    try:
        assert not worker._pull()
        theta, theta_w = parameters_to_vector(server.params).detach(), parameters_to_vector(worker.params).detach()
        assert theta_w.dtype == torch.float32 and torch.equal(theta_w, theta.to(torch.bfloat16).float())
        assert bool(((theta_w - theta).abs() <= BF16_ROUNDOFF * theta.abs() + 1e-38).all())
        assert not torch.equal(theta_w, theta)  # the rounding is real: the bound is not vacuous
        for _ in range(3):  # the third segment of 8 steps holds MatchSign's truncation at step 20
            traj, returns, lengths = worker.act()
        msg = worker.gradient(traj, returns, lengths)
        assert torch.equal(parameters_to_vector(worker.params).detach(), theta_w)  # acted and differentiated there
    finally:
        worker.runner.close()
    assert traj[keys.DONE].any() and not traj[keys.TERMINATED].any()  # truncations: V(s') bootstraps there
    ref = copy.deepcopy(worker.model).double()
    params = list(ref.parameters())
    assert all(p.requires_grad for p in params)  # a discrete model: no frozen statistics, no zero slots
    g_ref = torch.cat(
        [g.reshape(-1) for g in torch.autograd.grad(slow_a3c_loss(ref, traj, server.algo)["loss"], params)]
    )
    g16 = msg[keys.GRADIENT]
    assert g16.dtype == torch.bfloat16 and bool(g_ref.ne(0).any())
    float32_error = 1e-5 * float(g_ref.abs().max())
    err = (g16.double() - g_ref).abs()
    assert bool((err <= BF16_ROUNDOFF * (g_ref.abs() + float32_error) + float32_error).all()), float(err.max())
    assert not torch.equal(g16.double(), g_ref)  # it did go through bfloat16 (and float32)
