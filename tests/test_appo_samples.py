"""``algo.minibatch=samples`` (PPO's layout): GAE once per batch under the network as the batch
arrives, then minibatches of single samples across every row and step (distrl/algorithms/appo.py).

On one minibatch holding the whole batch both layouts compute the same thing: the advantages under
the same critic, the means over the same samples. So :func:`appo_sample_loss` on
:func:`batch_gae`'s samples must equal :func:`appo_loss` (itself checked against a slow loop in
tests/test_sf_units.py) in every scalar and every gradient, up to float32's reduction order.
"""

from __future__ import annotations

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
