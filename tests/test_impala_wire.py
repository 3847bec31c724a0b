"""IMPALA's bytes on the wire: an actor's packed message and the learner's parameter replies against
the issue's bound (the observation's own bytes plus 64 per env step) on MinAtar Breakout; the
learner unpacks what it queues, and refuses a packed message whose parts do not fit, in one line."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from distrl.config import override
from distrl.data import keys
from distrl.data.compact import BOOTSTRAP, FINAL, FINAL_INDEX
from distrl.data.wire import payload_nbytes
from distrl.envs.gym import env_info
from distrl.nn.models import ActorCritic
from distrl.runtime.context import RoleContext
from distrl.recipes.impala import recipe as impala
from distrl.recipes.impala.actor import ImpalaActor, wire_message
from distrl.recipes.impala.learner import ImpalaLearner
from distrl.data.trajectory import receive_trajectory
from distrl.roles.board import ParameterBoard
from distrl.transport.local import LocalHub
from test_compact import assert_same

ROLES = {0: "learner", 1: "actor"}
WIRE_OVERHEAD = 64  #: the issue's allowance per env step above the observation's own bytes
OBS_BYTES = 4 * 10 * 10  #: MinAtar Breakout's [4, 10, 10] bool observation


@pytest.fixture
def hub():
    h = LocalHub(2)
    yield h
    h.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def learner(hub, tmp_path):
    cfg = override(impala.minatar(), **{"run.logger": "none", "run.eval_episodes": 0})
    made = ImpalaLearner(RoleContext(cfg, hub.endpoint(0), 0, ROLES, tmp_path))
    yield made
    if made.session.tracker.writer is not None:
        made.session.tracker.writer.close()


@pytest.fixture
def actor(hub, tmp_path):
    made = ImpalaActor(RoleContext(impala.minatar(), hub.endpoint(1), 1, ROLES, tmp_path))
    yield made
    made.runner.close()


def params_bytes_per_step(cfg) -> float:
    """The parameter replies' bytes per env step: each actor gets the minatar network's parameters
    once per ``params_every`` updates of ``frames_per_batch`` frames."""
    info = env_info(cfg.run.env)
    board = ParameterBoard(ActorCritic(info.shape, info.num_actions, cfg.net))
    board.publish(0)
    return (
        cfg.algo.local_actors
        * payload_nbytes(board.reply(-1, False))
        / (cfg.algo.params_every * cfg.algo.frames_per_batch)
    )


def stop_reply_bytes() -> int:
    return payload_nbytes(ParameterBoard(torch.nn.Linear(1, 1)).reply(0, False))


def test_board_sends_parameters_only_min_gap_updates_apart():
    board = ParameterBoard(torch.nn.Linear(2, 1))
    assert keys.PARAMS not in board.reply(-1, False).keys()  # nothing published yet
    board.publish(10)
    assert keys.PARAMS in board.reply(-1, False, min_gap=16).keys()  # a caller with none gets them
    assert keys.PARAMS not in board.reply(0, False, min_gap=16).keys()  # 10 updates old: not yet
    assert keys.PARAMS in board.reply(0, False, min_gap=10).keys()
    assert keys.PARAMS in board.reply(9, False).keys() and keys.PARAMS not in board.reply(10, False).keys()


def test_minatar_actor_messages_fit_the_bound(actor):
    """Real envs and the preset's network: three messages' packed payloads, the stop-only replies
    to them, and the parameter replies amortised as the preset's ``params_every`` spaces them."""
    cfg = actor.cfg
    msgs = [actor._unroll() for _ in range(3)]
    frames = sum(m[keys.TRAJ].numel() for m in msgs)
    sent = sum(payload_nbytes(wire_message(m)) + stop_reply_bytes() for m in msgs)
    per_step = sent / frames + params_bytes_per_step(cfg)
    assert per_step <= OBS_BYTES + WIRE_OVERHEAD, f"{per_step:.1f} bytes per env step"


def test_minatar_packed_trajectory_and_parameters_fit_the_bound_without_episode_ends(actor):
    """The same accounting with the finals of truncated episodes and the episode statistics left
    out, with a margin: the packed steps, the bootstrap observation and the preset's parameter sends."""
    msg = actor._unroll()
    B, T = msg[keys.TRAJ].batch_size
    wire = wire_message(msg)
    finals = payload_nbytes(wire[keys.TRAJ].select(FINAL, FINAL_INDEX))
    stats = payload_nbytes(wire.select(keys.EPISODE_RETURNS, keys.EPISODE_LENGTHS))
    per_step = (payload_nbytes(wire) - finals - stats + stop_reply_bytes()) / (B * T) + params_bytes_per_step(actor.cfg)
    assert per_step <= OBS_BYTES + WIRE_OVERHEAD - 15, f"{per_step:.1f} bytes per env step"  # with a margin
    assert wire[keys.TRAJ, keys.TRAJ, keys.ACTION].dtype == torch.uint8
    assert keys.POLICY_VERSION not in wire[keys.TRAJ, keys.TRAJ].keys()  # one number for the message


def test_the_learner_unpacks_and_queues_the_trajectory(actor, learner):
    msg = actor._unroll()
    reply = learner._put_trajectory(wire_message(msg))
    assert keys.PARAMS in reply.keys()  # the actor has none yet (version -1)
    queued = learner.queue.get_nowait()
    assert_same(queued[keys.TRAJ], msg[keys.TRAJ])
    assert torch.equal(queued[keys.EPISODE_RETURNS], msg[keys.EPISODE_RETURNS])
    assert learner.wire.frames == msg[keys.TRAJ].numel() and learner.wire.bytes == payload_nbytes(
        wire_message(msg)
    ) + payload_nbytes(reply)


@pytest.mark.parametrize("env", ["CartPole-v1", "distrl.envs.torchrl_factories:cartpole_with_stepcounter"])
def test_both_env_paths_cross_the_wire_and_back(env, hub, tmp_path):
    """The gymnasium path and the TorchRL Collector path (per-frame policy versions of its own)."""
    cfg = override(impala.default(), **{"run.env": env, "algo.envs_per_actor": 3, "algo.unroll_length": 50})
    actor = ImpalaActor(RoleContext(cfg, hub.endpoint(1), 1, ROLES, tmp_path))
    try:
        traj = actor._unroll()[keys.TRAJ]
    finally:
        actor.runner.close()
    assert traj[keys.DONE].any()  # CartPole's random-policy episodes end within 50 steps
    got, problem = receive_trajectory(wire_message(TensorDict({keys.TRAJ: traj}))[keys.TRAJ], (4,))
    assert problem is None
    assert_same(got, traj)


def test_parameters_go_to_an_actor_params_every_updates_apart(actor, learner):
    msg = actor._unroll()
    every = learner.algo.params_every
    learner.board.publish(every - 1)
    msg[keys.PARAMS_VERSION] = torch.tensor(0)
    assert keys.PARAMS not in learner._put_trajectory(wire_message(msg)).keys()
    learner.board.publish(every)
    assert keys.PARAMS in learner._put_trajectory(wire_message(msg)).keys()


def test_a_packed_message_whose_parts_do_not_fit_is_rejected_in_one_line(actor, learner, capsys):
    msg = actor._unroll()
    wire = wire_message(msg)
    wire[keys.TRAJ, BOOTSTRAP] = wire[keys.TRAJ, BOOTSTRAP][:, :2]  # two channels of four
    learner._put_trajectory(wire)
    missing = wire_message(msg)
    del missing[keys.TRAJ][FINAL_INDEX]
    learner._put_trajectory(missing)
    assert learner.queue.empty() and learner.session.tracker.counters["rejected_trajectories"] == 2
    lines = [line for line in capsys.readouterr().out.splitlines() if "rejected" in line]
    assert len(lines) == 2
    assert lines[0].startswith("[learner] rejected a trajectory from rank 1: bootstrap observation (32, 2, 10, 10)")
    assert "final_index" in lines[1]
