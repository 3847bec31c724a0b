"""The pure-torch prioritized sampler against the formula (a slow loop), against an independent
brute-force sampler (numpy prefix sums and ``searchsorted``: exact leaves found, priorities,
probabilities and weights), against sampling frequencies (a chi-square test and a Bernstein bound
per item, both against the brute force's probabilities), and inside a TorchRL replay buffer.
(TorchRL's own ``PrioritizedSampler`` cannot serve as the reference: its C++ extension does not
load with torch 2.13.0+cpu.)

Schaul et al. (2016): P(i) = p_i^alpha / sum_k p_k^alpha, p_i = |delta_i| + eps,
w_i = (N P(i))^-beta / max_j (N P(j))^-beta.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from distrl.replay.weights import annealed_beta
from distrl.replay.sum_tree import SumTree, SumTreeSampler


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
    assert torch.allclose(
        sampler.probabilities(torch.arange(4)), torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    )
    batch = rb.sample()
    batch["td_error"] = torch.zeros(8, 2)
    batch["td_error"][batch["index"] == 3] = torch.tensor([0.0, 50.0])  # item 3: max over its two entries
    rb.update_tensordict_priority(batch)
    seen = batch["index"].unique().tolist()
    expected = {i: (50.0 if i == 3 else 1e-6) if i in seen else float(i + 1) for i in range(4)}
    assert torch.allclose(
        sampler.tree[torch.arange(4)], torch.tensor([expected[i] for i in range(4)], dtype=torch.float64)
    )


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


class BruteForceReplay:
    """Proportional prioritization written out (Schaul et al., 2016, section 3.3 and Algorithm 1)
    over numpy arrays, with no tree: what :class:`SumTreeSampler` must compute.

    ``delta[i]`` is item ``i``'s raw priority ``|delta_i|``; a new item gets the largest raw
    priority seen so far (1 before any), so it is sampled at least once before its TD error is
    known. Item ``i`` is drawn for a mass ``m`` in ``[0, sum_k p_k^alpha)`` when
    ``c_{i-1} <= m < c_i``, ``c_i = sum_{k<=i} p_k^alpha`` (prefix sums over the slots in order,
    0 for an empty slot).
    """

    def __init__(self, capacity: int, alpha: float, beta: float, eps: float):
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.delta = np.full(capacity, np.nan)  # nan: an empty slot
        self.max_delta = 1.0

    def extend(self, index) -> None:
        for i in index:
            self.delta[i] = self.max_delta

    def update(self, index, delta) -> None:
        for i, d in zip(index, delta):  # one by one: a repeated index keeps its last write
            self.delta[i] = d
            self.max_delta = max(self.max_delta, abs(d))

    @property
    def N(self) -> int:
        return int((~np.isnan(self.delta)).sum())

    def p_alpha(self) -> np.ndarray:
        """``p_i^alpha`` per slot, 0 for an empty one."""
        return np.where(np.isnan(self.delta), 0.0, (np.abs(np.nan_to_num(self.delta)) + self.eps) ** self.alpha)

    def P(self) -> np.ndarray:
        pa = self.p_alpha()
        return pa / pa.sum()

    def w(self) -> np.ndarray:
        """``(N P(i))^-beta / max_j (N P(j))^-beta`` per slot (nan for an empty one)."""
        P = self.P()
        stored = ~np.isnan(self.delta)
        raw = np.full(P.shape, np.nan)
        raw[stored] = (self.N * P[stored]) ** -self.beta
        return raw / np.nanmax(raw)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The item drawn for each ``mass``: the first ``i`` with ``c_i > m``."""
        return np.searchsorted(np.cumsum(self.p_alpha()), mass, side="right")


@pytest.mark.parametrize("capacity,fanout", [(1, 2), (7, 2), (50, 16), (300, 16), (1000, 3)])
def test_find_is_the_brute_force_prefix_search_exactly(capacity, fanout):
    """``SumTree.find(m)`` against ``searchsorted`` on numpy prefix sums of the leaves, at every
    leaf's left edge ``c_{i-1}`` (which belongs to leaf ``i``), at midpoints and at uniform masses,
    with empty leaves between the filled ones (never found). Leaves are multiples of 1/8 below 5,
    so every sum is exact in float64 whatever the order of additions: equality is exact."""
    rng = np.random.default_rng(capacity)
    filled = np.sort(rng.choice(capacity, size=max(1, capacity * 2 // 3), replace=False))
    values = rng.integers(1, 40, size=filled.size) / 8
    tree = SumTree(capacity, fanout)
    tree.set(torch.from_numpy(filled), torch.from_numpy(values))
    leaves = np.zeros(capacity)
    leaves[filled] = values
    c = np.cumsum(leaves)
    assert float(tree.total) == c[-1]
    left = c[filled] - values  # c_{i-1} of each filled leaf
    mass = np.concatenate([left, left + values / 2, rng.uniform(0, c[-1], 1000)])
    want = np.searchsorted(c, mass, side="right")
    got = tree.find(torch.from_numpy(mass)).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[: filled.size], filled)  # the left edge is the leaf's own
    assert np.isin(got, filled).all()


@pytest.mark.parametrize("fanout", [16, 3])
def test_sampler_matches_the_brute_force_replay(fanout):
    """Priorities, probabilities, the tree's total and the sampled items' weights after a history
    of writes (new items at the running maximum, updates with repeated indices, new items after
    updates, a partly filled buffer), against :class:`BruteForceReplay`. Float64 throughout except
    the weights the sampler returns as float32 (rtol 1e-6 is ~10 float32 ulps); the float64 sums
    differ only in the order of additions (rtol 1e-12)."""
    capacity, alpha, beta, eps = 200, 0.6, 0.4, 1e-4
    g, rng = torch.Generator().manual_seed(fanout), np.random.default_rng(fanout)
    sampler, ref = SumTreeSampler(capacity, alpha, beta, eps, fanout), BruteForceReplay(capacity, alpha, beta, eps)
    sampler._rng = g
    for step in range(4):
        new = np.arange(40 * step, 40 * step + 40)  # 40 new items, then updates to the stored ones
        sampler.extend(torch.from_numpy(new))
        ref.extend(new)
        idx = rng.integers(0, new[-1] + 1, size=60)  # repeats: the last write wins
        delta = rng.exponential(2.0, size=60) * rng.choice([-1, 1], size=60)  # raw TD errors, either sign
        sampler.update_priority(torch.from_numpy(idx), torch.from_numpy(delta))
        ref.update(idx, delta)
    stored = np.arange(ref.N)  # 160 of 200
    assert sampler.max_priority == ref.max_delta
    np.testing.assert_allclose(float(sampler.tree.total), ref.p_alpha().sum(), rtol=1e-12)
    np.testing.assert_allclose(sampler.tree[torch.from_numpy(stored)].numpy(), ref.p_alpha()[stored], rtol=1e-12)
    np.testing.assert_allclose(sampler.probabilities(torch.from_numpy(stored)).numpy(), ref.P()[stored], rtol=1e-12)
    index, info = sampler.sample(Storage(ref.N), 4096)
    assert index.max() < ref.N
    np.testing.assert_allclose(info["priority_weight"].numpy(), ref.w()[index.numpy()], rtol=1e-6)


def bernstein_radius(n: int, P: np.ndarray, delta: float) -> np.ndarray:
    """``t_i`` with ``Pr(|X_i - n P_i| >= t_i) <= delta / len(P)`` for ``X_i ~ Binomial(n, P_i)``:
    Bernstein's inequality ``Pr(|X - np| >= t) <= 2 exp(-t^2 / (2 (n p (1-p) + t/3)))`` solved for
    ``t`` (a union bound over the items makes ``delta`` the chance of any false failure)."""
    L = math.log(2 * len(P) / delta)
    var = n * P * (1 - P)
    return L / 3 + np.sqrt(L * L / 9 + 2 * L * var)


def test_sampling_frequencies_match_the_brute_force_probabilities():
    """200k draws over a 100-of-128 filled buffer (fan-out 4: four levels) with priorities spanning
    1000x, against the brute force's ``P(i)`` (not the sampler's own): empty slots never drawn,
    every item within its Bernstein radius (:func:`bernstein_radius`), and the chi-square
    statistic's p-value above 1e-6. Either bound fails a correct sampler with probability at most
    1e-6; the seed is fixed, so the outcome is the same on every run of this code. A sampler that
    drew a neighbour of the right item would miss by ~2000 draws (median) against radii of 60-600."""
    capacity, n_items, draws = 128, 100, 200_000
    alpha, beta, eps = 0.7, 0.5, 1e-6
    sampler, ref = SumTreeSampler(capacity, alpha, beta, eps, fanout=4), BruteForceReplay(capacity, alpha, beta, eps)
    sampler._rng = torch.Generator().manual_seed(3)
    items = np.arange(n_items)
    delta = np.random.default_rng(3).permutation(np.logspace(-2, 1, n_items))  # not monotone in the index
    sampler.extend(torch.from_numpy(items))
    sampler.update_priority(torch.from_numpy(items), torch.from_numpy(delta))
    ref.extend(items)
    ref.update(items, delta)
    counts = np.zeros(capacity)
    for _ in range(draws // 20_000):
        counts += np.bincount(sampler.sample(Storage(n_items), 20_000)[0].numpy(), minlength=capacity)
    P = ref.P()
    assert counts[n_items:].sum() == 0  # empty slots
    expected = P[:n_items] * draws
    miss = np.abs(counts[:n_items] - expected)
    assert (miss < bernstein_radius(draws, P[:n_items], 1e-6)).all(), int(
        np.argmax(miss / bernstein_radius(draws, P[:n_items], 1e-6))
    )
    chi2 = float(((counts[:n_items] - expected) ** 2 / expected).sum())
    df = n_items - 1
    p_value = float(
        torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(chi2 / 2, dtype=torch.float64))
    )
    assert p_value > 1e-6, (chi2, p_value)
