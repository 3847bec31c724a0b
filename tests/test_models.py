"""distrl's fast stand-ins in the models: the sigmoid-based tanh and the per-tower gradient clip."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from distrl.models import ActorCritic, Tanh, clip_towers


def test_tanh_is_torch_tanh_in_value_and_gradient():
    x = torch.cat([torch.linspace(-20, 20, 4001), torch.randn(1000) * 1e-4])  # the tails and around 0
    x.requires_grad_(True)
    ours, ref = Tanh()(x), torch.tanh(x)
    # 2 sigmoid(2x) - 1 rounds at sigmoid's scale (0.5): errors of a few float32 ulps of 1, absolute
    torch.testing.assert_close(ours, ref, atol=4e-7, rtol=0)
    g = torch.randn_like(x)
    (got,) = torch.autograd.grad(ours, x, g)
    (want,) = torch.autograd.grad(ref, x, g)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    with torch.no_grad():  # the no-grad path (inference, the critic on next observations)
        torch.testing.assert_close(Tanh()(x), ref.detach(), atol=4e-7, rtol=0)
    assert isinstance(Tanh(), nn.Tanh)


def test_actor_critic_uses_it_and_keeps_tanhs_state_dict():
    model = ActorCritic(4, 2)
    assert any(isinstance(m, Tanh) for m in model.modules())
    ref = ActorCritic(4, 2)
    ref.load_state_dict(model.state_dict())  # no parameters of its own: checkpoints unchanged


@pytest.mark.parametrize("max_norm", [1e-3, 1e3])
def test_clip_towers_clips_each_tower_on_its_own(max_norm):
    torch.manual_seed(0)
    model = ActorCritic(4, 2)
    grads = [torch.randn_like(p) * 3 for p in model.parameters()]
    for p, g in zip(model.parameters(), grads):
        p.grad = g.clone()
    total = clip_towers(model.tower_parameters(), max_norm)
    norms = []
    for tower in model.tower_parameters():  # the slow loop: each tower's norm, scaled to max_norm
        before = torch.sqrt(sum((grads[i] ** 2).sum() for i, p in enumerate(model.parameters())
                                if any(p is q for q in tower)))
        scale = min(1.0, max_norm / (float(before) + 1e-6))
        for i, p in enumerate(model.parameters()):
            if any(p is q for q in tower):
                torch.testing.assert_close(p.grad, grads[i] * scale, atol=1e-6, rtol=1e-5)
        norms.append(before)
    torch.testing.assert_close(total, torch.linalg.vector_norm(torch.stack(norms)), atol=1e-5, rtol=1e-5)
