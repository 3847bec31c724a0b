"""Door 4 of docs/torchrl.md: the replay role as a TorchRL-style buffer in a user's loop
(``distrl.ReplayServiceBuffer.local``: real ``ReplayServer`` shards on threads, no torchrun)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import distrl
from distrl.config import Config, RunConfig, TransportConfig
from distrl.data import keys
from distrl.data.wire import payload_nbytes
from distrl.runtime.context import RoleContext
from distrl.replay.inserter import Inserter
from distrl.replay.config import ReplayConfig
from distrl.replay.server import INSERT_N, INSERT_PROBED, ReplayServer
from distrl.transport.local import LocalHub
from helpers import live_threads, threads_left


def items(start: int, n: int, **extra) -> TensorDict:
    return TensorDict(x=torch.arange(start, start + n, dtype=torch.float32)[:, None], **extra, batch_size=[n])


def wait_len(rb, n: int, limit: float = 5.0) -> None:
    """``extend`` returns once a shard accepted the batch; its loop writes it a moment later."""
    deadline = time.monotonic() + limit
    while len(rb) < n:
        assert time.monotonic() < deadline, f"the shards hold {len(rb)} items, not {n}"
        time.sleep(0.01)


def test_extend_sample_and_priorities_over_two_shards():
    torch.manual_seed(0)
    with distrl.ReplayServiceBuffer.local(capacity=64, shards=2, alpha=1.0, beta=1.0, batch_size=32) as rb:
        assert len(live_threads("distrl-replay")) == 2
        for k in range(4):  # round robin: 2 batches of 10 per shard
            rb.extend(items(10 * k, 10, td_error=torch.ones(10)))
        wait_len(rb, 40)
        batch = rb.sample()
        assert batch.shape == (32,) and batch["x"].shape == (32, 1)
        assert {"index", "index_generation", "replay_shard", "priority_weight"} <= set(batch.keys())
        assert set(batch["replay_shard"].tolist()) == {1, 2} and torch.allclose(
            batch["priority_weight"], torch.ones(32)
        )
        # every sampled item drops to ~0 but item x=7 (the loss's td_error), which then dominates
        seen_7 = False
        for _ in range(50):
            batch = rb.sample()
            batch["td_error"] = torch.where(batch["x"][:, 0] == 7, 100.0, 0.0)
            rb.update_tensordict_priority(batch)
            seen_7 |= bool((batch["x"] == 7).any())
            if seen_7:
                break
        rb.flush()  # updates are sent without waiting
        rb.sample()  # the split over shards follows the totals of the last replies: refresh them
        share = (rb.sample(256)["x"] == 7).float().mean()
        assert share > 0.5, share
    assert not threads_left(set(), "distrl-replay")


def test_new_items_get_the_largest_priority_and_bad_use_is_one_line():
    with distrl.ReplayServiceBuffer.local(capacity=16, alpha=1.0, batch_size=8, timeout=0.5) as rb:
        with pytest.raises(RuntimeError, match="held every request"):
            rb.sample()  # empty: every shard holds
        rb.extend(items(0, 4), priority=torch.tensor([1.0, 1.0, 1.0, 5.0]))
        rb.extend(items(4, 1))  # no priority: the largest so far, 5
        wait_len(rb, 5)
        counts = torch.bincount(rb.sample(4000)["x"][:, 0].long(), minlength=5).float() / 4000
        assert counts[3] == pytest.approx(5 / 13, abs=0.04) and counts[4] == pytest.approx(5 / 13, abs=0.04)
        with pytest.raises(ValueError, match="differ from the first batch"):
            rb.extend(TensorDict(y=torch.zeros(2, 3), batch_size=[2]))
        with pytest.raises(TypeError, match="not a bare index"):
            rb.update_priority(torch.tensor([0, 1]), torch.ones(2))


def test_a_held_insert_waits_with_probes_not_its_payload():
    """While the rate limiter holds a batch, the sender asks with payload-free probes; the batch
    crosses the wire again only once the shard would take it."""
    replay = ReplayConfig(capacity=64, min_size=0, samples_per_insert=1.0, spi_tolerance=20.0)
    cfg = Config(recipe="replay", algo=replay, run=RunConfig(), transport=TransportConfig(call_timeout_s=1e9))
    hub = LocalHub(2)
    try:
        shard = ReplayServer(RoleContext(cfg, hub.endpoint(1), 1, {0: "client", 1: "replay"}, Path(".")), replay)
        inserter = Inserter(hub.endpoint(0), [1], 10.0, hold_sleep_s=0.01)
        batch = TensorDict({keys.TRANSITIONS: items(0, 16), keys.PRIORITY: torch.ones(16)})
        inserter.send(batch)
        assert inserter.settle() == Inserter.TAKEN
        inserter.send(batch)  # 16 more would put the inserts 32 ahead of the samples: beyond the tolerance
        assert inserter.settle(deadline=time.monotonic() + 0.2) == Inserter.HELD
        shard.limiter.samples += 16  # the learner caught up
        assert inserter.settle() == Inserter.TAKEN
        assert shard.counts["insert_held"] == 1 and inserter.held_s >= 0.1 and shard.inserts.frames == 32
        # the batch crossed 3 times (the last marked insert_probed: 1 byte), each answered with 2 bytes
        probes = shard.inserts.bytes - 3 * (payload_nbytes(batch) + 2) - 1
        assert probes >= 5 * 10 and probes % 10 == 0  # probes of 8 bytes, each answered with 2
        # paced from now on: the next batch waits for settle, a probe goes first, and it crosses once
        before = shard.inserts.bytes
        inserter.send(batch)
        assert shard.inserts.bytes == before
        assert inserter.settle(deadline=time.monotonic() + 0.1) == Inserter.HELD
        shard.limiter.samples += 16
        assert inserter.settle() == Inserter.TAKEN
        probes = shard.inserts.bytes - before - (payload_nbytes(batch) + 2) - 1
        assert probes >= 2 * 10 and probes % 10 == 0 and shard.counts["insert_held"] == 1
    finally:
        hub.close()


def test_an_insert_sent_after_a_probe_said_yes_is_taken_within_the_tolerance():
    """Another sender's insert may land between a probe and the insert it allowed: the probed
    insert is still taken while the limiter is within its tolerance before it."""
    replay = ReplayConfig(capacity=64, min_size=0, samples_per_insert=1.0, spi_tolerance=20.0)
    cfg = Config(recipe="replay", algo=replay, run=RunConfig(), transport=TransportConfig(call_timeout_s=1e9))
    hub = LocalHub(2)
    try:
        shard = ReplayServer(RoleContext(cfg, hub.endpoint(1), 1, {0: "client", 1: "replay"}, Path(".")), replay)
        batch = TensorDict({keys.TRANSITIONS: items(0, 16), keys.PRIORITY: torch.ones(16)})
        assert not bool(shard._insert(batch)[keys.HELD])  # error -16: 16 more would be -32, past -20
        assert bool(shard._insert_probe(TensorDict({INSERT_N: torch.tensor(16)}))[keys.HELD])
        assert bool(shard._insert(batch)[keys.HELD])
        probed = batch.clone(recurse=False)
        probed[INSERT_PROBED] = torch.tensor(True)
        assert not bool(shard._insert(probed)[keys.HELD])  # within the tolerance before it: taken
        assert bool(shard._insert(probed)[keys.HELD])  # -32: not within it any more
    finally:
        hub.close()
