"""Door 3: ``distrl.FleetCollector`` yields TorchRL ``[B, T]`` batches from impala's actors, takes
weights back through ``update_policy_weights_``, honours ``total_frames`` and leaves nothing behind."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn
from torchrl.modules import MLP

import distrl
from helpers import LOOPBACK, descendants, listening, live_threads, threads_left
from distrl.data import keys
from distrl.fleet.config import fleet_policy
from distrl.recipes.impala.actor import ImpalaActor

TOY = dict(env="distrl/MatchSign-v0", envs_per_actor=4, unroll_length=10)  # 40 frames per actor message


def test_batches_are_b_t_with_torchrl_keys_and_the_policy_version():
    with distrl.FleetCollector(**TOY, frames_per_batch=80, total_frames=160) as collector:
        assert all(type(a) is ImpalaActor for a in collector._fleet.actors.values())  # the role itself, no copy
        batches = list(collector)
    assert len(batches) == 2
    for batch in batches:
        assert tuple(batch.batch_size) == (8, 10)  # two messages of 4 envs x 10 steps
        for key in (*keys.IMPALA_IN_KEYS, keys.TRUNCATED):
            assert key in batch.keys(include_nested=True), key
        assert batch[keys.ACTION].dtype == torch.int64 and batch[keys.ACTION].shape == (8, 10)
        assert batch[keys.REWARD].shape == (8, 10, 1)
        assert batch[keys.POLICY_VERSION].dtype == torch.int64
        assert (batch[keys.POLICY_VERSION] == 0).all()  # nothing was pushed
    assert batches[0][keys.TRUNCATED].any() or batches[1][keys.TRUNCATED].any()  # 20-step episodes in 10-step rows


def always(action: int, obs_dim: int = 1, num_actions: int = 2) -> nn.Module:
    """A policy network of the actors' shape that picks ``action`` whatever it sees."""
    net = MLP(in_features=obs_dim, out_features=num_actions, num_cells=[64, 64])
    with torch.no_grad():
        net[-1].weight.zero_()
        net[-1].bias.copy_(torch.full((num_actions,), -50.0).index_fill_(0, torch.tensor([action]), 50.0))
    return net


def test_weights_pushed_through_update_policy_weights_reach_the_actors():
    with distrl.FleetCollector(**TOY, total_frames=4_000, queue_size=1) as collector:
        it = iter(collector)
        first = next(it)
        assert (first[keys.POLICY_VERSION] == 0).all()
        collector.update_policy_weights_(fleet_policy(always(1), 2))  # a TorchRL actor over the network
        assert collector.policy_version == 1
        for batch in it:  # a message in the queue and one per actor in flight still hold version 0
            if (batch[keys.POLICY_VERSION] >= 1).all():
                break
        else:
            pytest.fail("no batch collected with the pushed weights")
        assert (batch[keys.ACTION] == 1).all()  # the actors act with them
        collector.update_policy_weights_(always(0).state_dict())  # a state dict works too
        for batch in it:
            if (batch[keys.POLICY_VERSION] >= 2).all():
                break
        assert (batch[keys.ACTION] == 0).all()
        assert (batch[keys.POLICY_VERSION] == 2).all()


def test_total_frames_ends_iteration_and_stops_the_actors():
    before = live_threads()
    collector = distrl.FleetCollector(**TOY, frames_per_batch=80, total_frames=200)
    assert len(collector) == 3  # whole batches, rounded up as TorchRL's collectors do
    assert len(list(collector)) == 3 and collector.frames == 240
    assert not threads_left(before), "the fleet's threads outlived the budget"
    with pytest.raises(RuntimeError, match="shut down"):
        iter(collector).__next__()


def test_shutdown_mid_iteration_leaves_no_thread():
    before = live_threads()
    collector = distrl.FleetCollector(**TOY, queue_size=1)
    for _ in collector:
        break  # the actors are blocked on a full queue now: shutdown must still end them
    collector.shutdown()
    collector.shutdown()  # idempotent
    assert not threads_left(before)


def test_bad_arguments_fail_in_one_line():
    with pytest.raises(ValueError, match="multiple of envs_per_actor"):
        distrl.FleetCollector(**TOY, frames_per_batch=50)
    with pytest.raises(ValueError, match="not recipe 'seed'"):
        distrl.FleetCollector(**TOY, recipe="seed")
    with pytest.raises(ValueError, match="continuous"):
        distrl.FleetCollector(env="Pendulum-v1")
    with pytest.raises(ValueError, match="unknown env id"):
        distrl.FleetCollector(env="CartPol-v1")
    with pytest.raises(ValueError, match="below call_timeout_s"):
        distrl.FleetCollector(**TOY, put_timeout_s=40.0)
    with pytest.raises(ValueError, match="actors' MLP"):  # a 32-wide network cannot go into the actors
        distrl.FleetCollector(MLP(in_features=1, out_features=2, num_cells=[32]), **TOY)
    before = live_threads()
    with distrl.FleetCollector(**TOY) as collector:
        with pytest.raises(ValueError, match="shapes"):
            collector.update_policy_weights_({"w": torch.zeros(3)})
    assert not threads_left(before)


def test_actor_processes_over_rpc(no_leaked_processes):
    """world_size=3: two actor processes, this one rank 0; versions rise, every socket of the fleet
    listens on loopback, nothing is left after, the user's environment variables included (a leaked
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE changed how every later torchrun job named its run dir)."""
    environ = dict(os.environ)
    with distrl.FleetCollector(
        **TOY, world_size=3, frames_per_batch=80, total_frames=2_000, queue_size=2, init_timeout_s=60.0
    ) as collector:
        versions, sockets = [], set()
        for batch in collector:
            assert tuple(batch.batch_size) == (8, 10)
            versions.append(int(batch[keys.POLICY_VERSION].min()))
            collector.update_policy_weights_()
            if len(versions) == 5:
                sockets = listening(descendants(os.getpid()) | {os.getpid()})
    assert versions[0] == 0 and versions[-1] >= 10, versions
    assert sockets and all(s.startswith(LOOPBACK) for s in sockets), sockets
    assert dict(os.environ) == environ
