"""distrl's fast stand-ins in the models (the sigmoid-based tanh, the per-tower gradient clip), and
the flat networks' layout kept from earlier releases."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distrl.nn.models import ActorCritic, Tanh, clip_towers


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
        before = torch.sqrt(
            sum((grads[i] ** 2).sum() for i, p in enumerate(model.parameters()) if any(p is q for q in tower))
        )
        scale = min(1.0, max_norm / (float(before) + 1e-6))
        for i, p in enumerate(model.parameters()):
            if any(p is q for q in tower):
                torch.testing.assert_close(p.grad, grads[i] * scale, atol=1e-6, rtol=1e-5)
        norms.append(before)
    torch.testing.assert_close(total, torch.linalg.vector_norm(torch.stack(norms)), atol=1e-5, rtol=1e-5)


def test_flat_networks_are_the_torchrl_mlps_of_earlier_releases():
    """The mlp encoder's towers are laid out and initialised as TorchRL's ``MLP`` was (what every
    earlier release built): the same state-dict keys and, under a seed, the same initial weights,
    so checkpoints load and CartPole runs keep their numbers."""
    from dataclasses import replace

    from torchrl.modules import MLP

    from distrl.config import NetConfig
    from distrl.nn.models import ACTIVATIONS, QNetwork
    from distrl.nn.recurrent import RecurrentActorCritic

    net = NetConfig(hidden=(32, 16), activation="elu")

    def mlp(n_in, n_out, last=False):
        return MLP(
            in_features=n_in,
            out_features=n_out,
            num_cells=list(net.hidden[:-1] if last else net.hidden),
            activation_class=ACTIVATIONS[net.activation],
            activate_last_layer=last,
        )

    def same(model, *old: tuple[str, torch.nn.Module]):
        want = {f"{prefix}.{k}": v for prefix, m in old for k, v in m.state_dict().items()}
        got = {k: v for k, v in model.state_dict().items() if any(k.startswith(f"{p}.") for p, _ in old)}
        assert list(got) == list(want)
        for k in want:
            assert torch.equal(got[k], want[k]), k

    torch.manual_seed(0)
    old_pi, old_v = mlp(5, 3), mlp(5, 1)
    with torch.no_grad():
        old_pi[-1].weight.mul_(0.01)
        old_pi[-1].bias.zero_()
    torch.manual_seed(0)
    same(ActorCritic(5, 3, net), ("policy", old_pi), ("value", old_v))
    torch.manual_seed(0)  # a Gaussian's mean tower is the same MLP, followed by its log-std
    same(ActorCritic(5, None, replace(net, obs_norm="off"), 3), ("policy.0", old_pi), ("value", old_v))
    torch.manual_seed(0)
    old_q = mlp(5, 3)
    torch.manual_seed(0)
    same(QNetwork((5,), 3, net), ("q", old_q))
    torch.manual_seed(0)
    old_pi, old_pi_core = mlp(5, 16, last=True), torch.nn.LSTMCell(16, 8)  # the old _Tower's build order
    old_v, old_v_core = mlp(5, 16, last=True), torch.nn.LSTMCell(16, 8)
    torch.manual_seed(0)
    same(
        RecurrentActorCritic(5, 3, net, 8),
        ("pi.encoder", old_pi),
        ("pi.core", old_pi_core),
        ("v.encoder", old_v),
        ("v.core", old_v_core),
    )


def test_a_dueling_q_network_is_value_plus_centred_advantages():
    import torch

    from distrl.config import NetConfig
    from distrl.nn.models import DuelingHead, QNetwork

    torch.manual_seed(0)
    q = QNetwork((5,), 3, NetConfig(hidden=(16, 16), activation="relu"), dueling=True)
    torso, head = q.q
    assert isinstance(head, DuelingHead) and head.advantage.out_features == 3
    obs = torch.randn(7, 5)
    z = torso(obs)
    a = head.advantage(z)
    torch.testing.assert_close(q(obs), head.value(z) + a - a.mean(-1, keepdim=True))
    torch.testing.assert_close(q(obs).mean(-1, keepdim=True), head.value(z))  # the mean over actions is V
    image = QNetwork((4, 10, 10), 3, NetConfig(encoder="minatar"), dueling=True)
    assert image(torch.zeros(2, 4, 10, 10, dtype=torch.bool)).shape == (2, 3)
