"""The pure-torch prioritized sampler against the formula (a slow loop), against sampling
frequencies (a chi-square test), inside a TorchRL replay buffer, and against TorchRL's own
``PrioritizedSampler`` where its C++ extension loads (skipped where it does not: torch 2.13.0+cpu).

Schaul et al. (2016): P(i) = p_i^alpha / sum_k p_k^alpha, p_i = |delta_i| + eps,
w_i = (N P(i))^-beta / max_j (N P(j))^-beta.
"""
from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from distrl.algorithms.apex import annealed_beta
from distrl.sum_tree import SumTree, SumTreeSampler


class Storage:
    """The one thing a sampler asks its storage: how many items it holds."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def slow_probabilities(raw: list[float], alpha: float, eps: float) -> list[float]:
    p = [(abs(d) + eps) ** alpha for d in raw]
    total = sum(p)
    return [x / total for x in p]


def slow_weights(probs: list[float], beta: float) -> list[float]:
    N = len(probs)
    w = [(N * P) ** -beta for P in probs]
    top = max(w)
    return [x / top for x in w]


@pytest.mark.parametrize("capacity,fanout", [(1, 16), (7, 2), (300, 16), (4096, 16), (1000, 3)])
def test_probabilities_and_weights_match_the_formula(capacity, fanout):
    g = torch.Generator().manual_seed(capacity)
    alpha, beta, eps = 0.6, 0.4, 1e-3
    sampler = SumTreeSampler(capacity, alpha, beta, eps, fanout)
    sampler._rng = g
    size = max(1, capacity * 3 // 4)  # a partly filled buffer: empty slots must never come out
    sampler.extend(torch.arange(size))
    raw = (torch.rand(size, generator=g, dtype=torch.float64) * 5).tolist()
    sampler.update_priority(torch.arange(size), torch.tensor(raw, dtype=torch.float64))
    for _ in range(3):  # later updates, with repeated indices (the last write wins)
        idx = torch.randint(size, (50,), generator=g)
        new = torch.rand(50, generator=g, dtype=torch.float64) * 5
        sampler.update_priority(idx, new)
        for i, d in zip(idx.tolist(), new.tolist()):
            raw[i] = d
    probs, weights = slow_probabilities(raw, alpha, eps), slow_weights(slow_probabilities(raw, alpha, eps), beta)
    index, info = sampler.sample(Storage(size), 512)
    assert index.min() >= 0 and index.max() < size
    expect_p = torch.tensor([probs[i] for i in index.tolist()], dtype=torch.float64)
    expect_w = torch.tensor([weights[i] for i in index.tolist()], dtype=torch.float32)
    torch.testing.assert_close(sampler.probabilities(index), expect_p, rtol=1e-9, atol=0)
    torch.testing.assert_close(info["priority_weight"], expect_w, rtol=1e-5, atol=0)
    assert math.isclose(float(sampler.tree.total), sum((abs(d) + eps) ** alpha for d in raw), rel_tol=1e-12)


def test_sampling_frequencies_match_the_probabilities():
    """Chi-square goodness of fit, 200k draws over 64 items with priorities spanning 1000x. Under
    the null the statistic exceeds the threshold with probability 1e-6 (a false failure one run in
    a million); the seed is fixed, so the outcome is the same on every run of this code."""
    g = torch.Generator().manual_seed(1)
    n, draws = 64, 200_000
    sampler = SumTreeSampler(n, alpha=0.7, beta=0.5, eps=1e-6, fanout=4)
    sampler._rng = g
    sampler.extend(torch.arange(n))
    sampler.update_priority(torch.arange(n), torch.logspace(-2, 1, n, dtype=torch.float64))
    counts = torch.zeros(n, dtype=torch.float64)
    for _ in range(draws // 20_000):
        counts += torch.bincount(sampler.sample(Storage(n), 20_000)[0], minlength=n).double()
    expected = sampler.probabilities(torch.arange(n)) * draws
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = n - 1
    p_value = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(chi2 / 2)))
    assert p_value > 1e-6, (chi2, p_value)


def test_plugs_into_a_torchrl_replay_buffer_with_fifo_eviction():
    capacity = 32
    sampler = SumTreeSampler(capacity, alpha=1.0, beta=1.0, eps=1e-6)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler, batch_size=64)
    rb.extend(TensorDict(x=torch.arange(40.0)[:, None], batch_size=[40]))  # 8 overwrite the oldest
    assert len(rb) == capacity
    sample, info = rb.sample(return_info=True)
    assert sample["x"].min() >= 8 and info["priority_weight"].shape == (64,)
    rb.update_priority(torch.arange(capacity), torch.zeros(capacity))  # all but item 5 as good as never
    rb.update_priority(torch.tensor([5]), torch.tensor([1e3]))
    assert (rb.sample()["index"] == 5).float().mean() > 0.99
    rb.extend(TensorDict(x=torch.tensor([[99.0]]), batch_size=[1]))  # a new item gets the max priority
    assert math.isclose(float(sampler.probabilities(torch.tensor([8]))), 0.5, rel_tol=1e-3)


def test_torchrls_priority_key_flow_reaches_the_tree():
    """``TensorDictReplayBuffer(priority_key=...)``: priorities come in with ``extend`` and go back
    with ``update_tensordict_priority`` (a loss writes ``td_error``; ``[B, 2]`` reduced by max)."""
    import distrl  # the public name

    torch.manual_seed(0)
    sampler = distrl.SumTreeSampler(16, alpha=1.0, beta=1.0, eps=1e-6)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16), sampler=sampler, batch_size=8, priority_key="td_error")
    rb.extend(TensorDict(x=torch.arange(4.0), td_error=torch.tensor([1.0, 2.0, 3.0, 4.0]), batch_size=[4]))
    assert torch.allclose(sampler.probabilities(torch.arange(4)), torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64))
    batch = rb.sample()
    batch["td_error"] = torch.zeros(8, 2)
    batch["td_error"][batch["index"] == 3] = torch.tensor([0.0, 50.0])  # item 3: max over its two entries
    rb.update_tensordict_priority(batch)
    seen = batch["index"].unique().tolist()
    expected = {i: (50.0 if i == 3 else 1e-6) if i in seen else float(i + 1) for i in range(4)}
    assert torch.allclose(sampler.tree[torch.arange(4)], torch.tensor([expected[i] for i in range(4)], dtype=torch.float64))


def test_state_dict_round_trip_and_beta_annealing():
    a = SumTreeSampler(100, alpha=0.5, beta=0.4)
    a.extend(torch.arange(60))
    a.update_priority(torch.arange(60), torch.rand(60))
    b = SumTreeSampler(100, alpha=0.5, beta=0.4)
    b.load_state_dict(a.state_dict())
    for la, lb in zip(a.tree.sums + a.tree.mins, b.tree.sums + b.tree.mins):
        torch.testing.assert_close(la, lb)
    assert annealed_beta(0.4, 0, 100) == 0.4 and annealed_beta(0.4, 50, 100) == pytest.approx(0.7)
    assert annealed_beta(0.4, 500, 100) == 1.0


def test_tree_never_picks_an_empty_or_padding_leaf():
    tree = SumTree(50, fanout=16)  # leaves padded to 64
    tree.set(torch.tensor([0, 49]), torch.tensor([1.0, 3.0]))
    mass = torch.tensor([0.0, 0.999999, 1.0, 3.9999999999, 4.0, 1e9])  # at, below and past the total
    assert set(tree.find(mass).tolist()) <= {0, 49}
    assert tree.find(torch.tensor([0.5, 2.0])).tolist() == [0, 49]


def _torchrl_sampler(capacity, alpha, beta, eps):
    from torchrl.data.replay_buffers.samplers import PrioritizedSampler

    try:
        s = PrioritizedSampler(capacity, alpha=alpha, beta=beta, eps=eps)
        s._sum_tree  # noqa: B018  (the trees are built lazily on some versions)
        return s
    except Exception as e:  # the C++ extension does not load with this torch build
        pytest.skip(f"TorchRL's PrioritizedSampler needs torchrl._torchrl, which does not load here: {e}")


def test_agrees_with_torchrls_prioritized_sampler():
    capacity, alpha, beta, eps = 200, 0.6, 0.4, 1e-4
    theirs = _torchrl_sampler(capacity, alpha, beta, eps)
    ours = SumTreeSampler(capacity, alpha, beta, eps)
    storage = LazyTensorStorage(capacity)
    storage.set(torch.arange(150), TensorDict(x=torch.zeros(150), batch_size=[150]))
    priority = torch.rand(150, dtype=torch.float64) * 3
    for s in (theirs, ours):
        s.extend(torch.arange(150))
        s.update_priority(torch.arange(150), priority)
    index, info = theirs.sample(storage, 256)
    ours_w = torch.pow(ours.probabilities(index) / (ours.tree.min / ours.tree.total), -beta)
    torch.testing.assert_close(ours_w.float(), torch.as_tensor(info["priority_weight"]).float(), rtol=1e-4, atol=0)
