"""Door 4 of docs/torchrl.md: the replay role as a TorchRL-style buffer in a user's loop
(``distrl.ReplayServiceBuffer.local``: real ``ReplayServer`` shards on threads, no torchrun)."""
from __future__ import annotations

import time

import pytest
import torch
from tensordict import TensorDict

import distrl
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
        assert set(batch["replay_shard"].tolist()) == {1, 2} and torch.allclose(batch["priority_weight"], torch.ones(32))
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
