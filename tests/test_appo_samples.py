"""``algo.minibatch=samples`` (PPO's layout): GAE once per batch under the network as the batch
arrives, then minibatches of single samples across every row and step (distrl/algorithms/appo.py).

On one minibatch holding the whole batch both layouts compute the same thing: the advantages under
the same critic, the means over the same samples. So :func:`appo_sample_loss` on
:func:`batch_gae`'s samples must equal :func:`appo_loss` (itself checked against a slow loop in
tests/test_sf_units.py) in every scalar and every gradient, up to float32's reduction order.
"""

from __future__ import annotations

import math

import pytest
import torch

from distrl.algorithms.appo import appo_loss, appo_sample_loss, batch_gae
from distrl.algorithms.ppo import minibatches
from distrl.config import override
from distrl.data import keys
from distrl.recipes.sf.recipe import debug
from test_sf_units import appo_batch, sharpened_model


@pytest.mark.parametrize("normalize", [False, True])
def test_samples_on_one_minibatch_equal_the_row_loss(normalize):
    algo = override(
        debug(),
        **{"algo.vtrace": False, "algo.normalize_advantage": normalize, "algo.reward_scale": 0.5,
           "algo.entropy_coef": 0.1, "algo.minibatch": "samples"},
    ).algo  # fmt: skip
    model = sharpened_model(2, 3, seed=0)
    batch = appo_batch(model, log_ratio=0.6)
    want = appo_loss(model, batch, algo)
    want_grads = torch.autograd.grad(want[keys.LOSS], list(model.parameters()))
    samples = batch_gae(model, batch, algo)
    assert samples.batch_size == torch.Size([batch.numel()])
    got = appo_sample_loss(model, samples, algo)
    got_grads = torch.autograd.grad(got[keys.LOSS], list(model.parameters()))
    assert set(got.keys()) == set(want.keys())
    for name in want.keys():
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_sample_minibatches_mix_rows_and_steps():
    """A minibatch of samples draws from many rows at scattered steps (rows' minibatches hold whole
    rows: T consecutive steps of few envs)."""
    algo = override(debug(), **{"algo.vtrace": False, "algo.minibatch": "samples"}).algo
    model = sharpened_model(2, 3, seed=0)
    batch = appo_batch(model, B=8, T=6)
    batch[keys.OBSERVATION] = torch.arange(48.0).reshape(8, 6, 1).expand(8, 6, 2).clone()  # sample id
    torch.manual_seed(0)
    parts = list(minibatches(batch_gae(model, batch, algo), 1, 4))
    ids = [p[keys.OBSERVATION][:, 0].long() for p in parts]
    assert sorted(torch.cat(ids).tolist()) == list(range(48))  # every sample once
    assert all(len(set((i // 6).tolist())) >= 3 for i in ids)  # 12 samples from >= 3 of 8 rows


def test_samples_need_gae():
    with pytest.raises(ValueError, match="algo.vtrace=false"):
        override(debug(), **{"algo.vtrace": True, "algo.minibatch": "samples"})


def _value_norm_pair(mean: float, std: float, seed: int = 0):
    """``(normed, raw)``: the same network twice, ``normed`` with ``net.value_norm=on`` and target
    statistics ``(mean, std^2)``, ``raw`` without, its value head's last layer rescaled so that its
    value is ``normed``'s denormalised one: ``std v + mean``."""
    import dataclasses

    from distrl.config import NetConfig
    from distrl.nn.models import ActorCritic

    raw = sharpened_model(2, 3, seed=seed)
    normed = ActorCritic(2, 3, dataclasses.replace(NetConfig(), value_norm="on"))
    normed.load_state_dict({**raw.state_dict(), **normed.value_norm.state_dict(prefix="value_norm.")})
    with torch.no_grad():
        normed.value_norm.mean.fill_(mean)
        normed.value_norm.var.fill_(std**2)
        last = [m for m in raw.value.modules() if isinstance(m, torch.nn.Linear)][-1]
        last.weight.mul_(std)
        last.bias.mul_(std).add_(mean)
    return normed, raw


def test_value_norm_changes_the_critic_units_and_nothing_else():
    """``net.value_norm=on`` (Sample Factory's ``normalize_returns``): with target statistics
    ``(m, s^2)`` a critic predicting ``v`` stands for ``s v + m`` in reward units. So against a plain
    network whose critic outputs ``s v + m``: the same advantages, targets and policy terms, and a
    value loss ``1 / s^2`` of the plain one's (``(s v + m - t)^2 = s^2 (v - (t - m) / s)^2``), as
    long as no standardised target reaches the 5-sd clamp. Rows and samples layouts alike."""
    algo = override(
        debug(), **{"algo.vtrace": False, "algo.minibatch": "samples", "algo.reward_scale": 1.0}
    ).algo  # fmt: skip
    normed, raw = _value_norm_pair(mean=0.7, std=2.5)
    batch = appo_batch(raw, log_ratio=0.6)
    samples_n, samples_r = batch_gae(normed, batch, algo), batch_gae(raw, batch, algo)
    for k in (keys.ADVANTAGE, keys.VALUE_TARGET):  # in reward units under both
        torch.testing.assert_close(samples_n[k], samples_r[k], rtol=1e-5, atol=1e-5)
    z = (samples_r[keys.VALUE_TARGET] - 0.7) / 2.5
    assert float(z.abs().max()) < 5.0  # the clamp stays out of this comparison
    for got, want in ((appo_sample_loss(normed, samples_n, algo), appo_sample_loss(raw, samples_r, algo)),
                      (appo_loss(normed, batch, algo), appo_loss(raw, batch, algo))):  # fmt: skip
        for name in ("loss_policy", "entropy", "approx_kl", "clip_fraction", "advantage_std"):
            torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["loss_value"], want["loss_value"] / 2.5**2, rtol=1e-4, atol=1e-6)


def test_value_norm_round_trip_and_statistics():
    """The statistics are the targets' (Chan's merge over batches) and ``denormalize`` inverts the
    standardisation wherever the clamp does not act."""
    from distrl.nn.obs_norm import ObsNorm

    norm = ObsNorm(1, clip=5.0)
    g = torch.Generator().manual_seed(0)
    parts = [torch.randn(n, generator=g) * 3 + 2 for n in (100, 37, 256)]
    for p in parts:
        norm.update_batch(p.unsqueeze(-1))
    every = torch.cat(parts).double()
    torch.testing.assert_close(norm.mean.double(), every.mean().reshape(1), rtol=0, atol=1e-5)
    torch.testing.assert_close(norm.var.double(), every.var(unbiased=False).reshape(1), rtol=1e-5, atol=1e-5)
    x = torch.linspace(-10, 14, 50).unsqueeze(-1)
    torch.testing.assert_close(norm.denormalize(norm(x)), x, rtol=1e-5, atol=1e-5)
    assert float(norm(torch.tensor([[1e6]]))) == 5.0


def test_value_norm_is_refused_where_no_loss_reads_it():
    from distrl.cli.runner import plan

    cfg = override(debug(), **{"net.value_norm": "on", "algo.vtrace": False})
    with pytest.raises(ValueError, match="algo.minibatch=samples"):
        plan(cfg, 1)
    from distrl.recipes.impala.recipe import debug as impala_debug

    with pytest.raises(ValueError, match="impala's loss does not normalise value targets.*sf's does"):
        plan(override(impala_debug(), **{"net.value_norm": "on"}), 1)


def test_decoupled_ppo_against_a_slow_loop():
    """``algo.decoupled``: per sample ``w = min(pi_prox / mu, rho_bar)``, ``r = pi / pi_prox``, the
    policy loss ``-mean_i w_i min(r_i A_i, clip(r_i) A_i)`` (A normalised first), written out sample
    by sample in float64. The network moved one Adam step away from the proximal one so that ``r`` is
    not 1; ``mu`` spread ``+-0.6`` in log around it so that ``w`` is truncated for some samples."""
    algo = override(
        debug(), **{"algo.vtrace": False, "algo.minibatch": "samples", "algo.decoupled": True, "algo.rho_bar": 1.2,
                    "algo.normalize_advantage": True, "algo.clip_eps": 0.1}
    ).algo  # fmt: skip
    model = sharpened_model(2, 3, seed=0)
    batch = appo_batch(model, log_ratio=0.6)
    samples = batch_gae(model, batch, algo)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    appo_sample_loss(model, samples, algo)[keys.LOSS].backward()
    opt.step()
    got = appo_sample_loss(model, samples, algo)
    with torch.no_grad():
        out, _ = model(samples[keys.OBSERVATION])
        log_pi = torch.log_softmax(out.double(), -1).gather(-1, samples[keys.ACTION].unsqueeze(-1)).squeeze(-1)
    A = samples[keys.ADVANTAGE].double()
    A = (A - A.mean()) / (A.std() + 1e-8)
    terms = []
    for i in range(A.numel()):
        prox, mu = float(samples[keys.PROXIMAL_LOG_PROB][i]), float(samples[keys.ACTION_LOG_PROB][i])
        w = min(math.exp(prox - mu), 1.2)
        r = math.exp(float(log_pi[i]) - prox)
        terms.append(w * min(r * float(A[i]), min(max(r, 0.9), 1.1) * float(A[i])))
    want = -sum(terms) / len(terms)
    assert abs(float(got["loss_policy"]) - want) < 1e-5 * max(1.0, abs(want))
    w_all = (samples[keys.PROXIMAL_LOG_PROB] - samples[keys.ACTION_LOG_PROB]).exp()
    assert bool((w_all > 1.2).any()) and bool((w_all < 1.0).any())  # the truncation acts on some samples only
    assert 0 < float(got["clip_fraction"]) < 1


def test_decoupled_on_fresh_data_is_plain_ppo():
    """Where the behaviour policy is the network itself (no lag), ``pi_prox = mu`` and decoupled PPO
    is PPO: the same loss and gradients."""
    base = {"algo.vtrace": False, "algo.minibatch": "samples"}
    model = sharpened_model(2, 3, seed=1)
    batch = appo_batch(model, log_ratio=0.0)
    plain, decoupled = (override(debug(), **base, **{"algo.decoupled": d}).algo for d in (False, True))
    samples = batch_gae(model, batch, plain)
    torch.testing.assert_close(samples[keys.PROXIMAL_LOG_PROB], samples[keys.ACTION_LOG_PROB], rtol=1e-5, atol=1e-6)
    a, b = appo_sample_loss(model, samples, plain), appo_sample_loss(model, samples, decoupled)
    ga = torch.autograd.grad(a[keys.LOSS], list(model.parameters()))
    gb = torch.autograd.grad(b[keys.LOSS], list(model.parameters()))
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="algo.minibatch=samples"):
        override(debug(), **{"algo.decoupled": True})
