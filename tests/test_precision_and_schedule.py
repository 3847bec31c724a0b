"""``net.precision`` (an encoder under bfloat16 autocast, float32 out; an MLP's head in float32) and ``run.lr_schedule``
(the learning rate over the budget, on the clock ``--resume`` restores). Quick tier."""

from __future__ import annotations

import math

import pytest
import torch

from distrl.config import NetConfig, RunConfig
from distrl.nn.encoders import MLPEncoder, autocast_dtype, make_encoder, native_bfloat16
from distrl.nn.models import TRUNCATED_NORMAL_STD, ActorCritic
from distrl.roles.learner import lr_factor, set_lr

ATARI = (4, 84, 84)


def frames(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, *ATARI), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", ["nature", "impala", "minatar"])
def test_bfloat16_features_come_out_float32_and_near_float32s(name):
    shape = ATARI if name != "minatar" else (4, 10, 10)
    torch.manual_seed(0)
    full = make_encoder(shape, NetConfig(encoder=name))
    half = make_encoder(shape, NetConfig(encoder=name, precision="bfloat16"))
    half.load_state_dict(full.state_dict())
    obs = frames(8) if name != "minatar" else torch.rand(8, *shape) < 0.2
    a, b = full(obs), half(obs)
    assert b.dtype == torch.float32 and b.shape == a.shape
    # bfloat16 keeps 8 bits of mantissa: each layer's output within ~2^-8 of its size, a few layers deep
    assert (a - b).abs().max() <= 0.05 * a.abs().max() + 1e-3, (a - b).abs().max()


@pytest.mark.parametrize("head", [1, None])
def test_a_bfloat16_mlp_runs_its_hidden_layers_in_bfloat16_and_its_head_in_float32(head):
    """SAC's towers: the head's input and output float32 (a Q of 500 keeps float32's resolution),
    the hidden matmuls bfloat16, every gradient float32."""
    torch.manual_seed(0)
    net = NetConfig(hidden=(256, 256), activation="relu")
    full = MLPEncoder((23,), net, head=head)
    half = MLPEncoder((23,), NetConfig(**{**net.__dict__, "precision": "bfloat16"}), head=head)
    half.load_state_dict(full.state_dict())
    seen = {}

    def record(i):
        def hook(module, inputs, output) -> None:  # returns None: the output stays as it was
            seen[i] = (inputs[0].dtype, output.dtype)

        return hook

    for i, layer in enumerate(half):
        layer.register_forward_hook(record(i))
    x = torch.randn(64, 23)
    a, b = full(x), half(x)
    assert b.dtype == torch.float32 and b.shape == a.shape
    assert seen[0][1] == seen[2][1] == torch.bfloat16  # the hidden Linear layers
    if head is not None:
        assert seen[4] == (torch.float32, torch.float32)
    assert (a - b).abs().max() <= 0.03 * a.abs().max() + 1e-3, (a - b).abs().max()
    b.square().mean().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in half.parameters())


def test_bfloat16_log_probs_stay_close_and_the_gradient_reaches_every_weight():
    """What PPO reads: the log-probability of the action taken (its ratio is a difference of two)."""
    torch.manual_seed(0)
    full = ActorCritic(ATARI, 6, NetConfig())
    half = ActorCritic(ATARI, 6, NetConfig(precision="bfloat16"))
    half.load_state_dict(full.state_dict())
    obs, action = frames(16), torch.randint(0, 6, (16,))
    (out_a, _), (out_b, v_b) = full(obs), half(obs)
    assert out_b.dtype == v_b.dtype == torch.float32
    lp_a, _ = full.head.log_prob_entropy(out_a, action)
    lp_b, ent_b = half.head.log_prob_entropy(out_b, action)
    assert (lp_a - lp_b).abs().max() < 1e-2
    (-lp_b.mean() + v_b.square().mean() - ent_b.mean()).backward()
    assert all(
        p.grad is not None and p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all() for p in half.parameters()
    )


def test_auto_is_bfloat16_only_where_the_device_computes_it():
    assert autocast_dtype("float32", "cpu") is None
    assert autocast_dtype("bfloat16", "cpu") is torch.bfloat16
    assert autocast_dtype("auto", "cpu") is (torch.bfloat16 if native_bfloat16("cpu") else None)
    assert autocast_dtype("auto", "mps") is None


def test_a_bad_precision_or_schedule_is_one_line():
    with pytest.raises(ValueError, match="net.precision must be one of"):
        NetConfig(precision="fp16")
    with pytest.raises(ValueError, match="run.lr_schedule must be one of"):
        RunConfig(lr_schedule="cosine")


def test_linear_decays_to_zero_over_the_budget():
    assert [lr_factor("constant", p) for p in (0.0, 0.5, 1.0)] == [1.0, 1.0, 1.0]
    assert [lr_factor("linear", p) for p in (0.0, 0.25, 1.0, 1.5)] == [1.0, 0.75, 0.0, 0.0]


def test_the_starting_rate_travels_in_the_optimizer_state_so_a_resume_goes_on_from_it():
    model = torch.nn.Linear(3, 2)
    optim = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    set_lr(optim, lr_factor("linear", 0.4))
    assert optim.param_groups[0]["lr"] == pytest.approx(1.5e-4)
    saved = optim.state_dict()
    resumed = torch.optim.Adam(model.parameters(), lr=2.5e-4)  # built from the config, then restored
    resumed.load_state_dict(saved)
    set_lr(resumed, lr_factor("linear", 0.6))  # the clock goes on: 60% of the budget done
    assert resumed.param_groups[0]["lr"] == pytest.approx(1.0e-4)  # 2.5e-4 x 0.4, not 1.5e-4 x 0.4


@pytest.mark.parametrize("shape", [ATARI, (4, 10, 10), (7,)])
def test_orthogonal_init_is_ppos_and_keeps_the_features_scale(shape):
    """Gain sqrt(2) on every hidden layer, 0.01 on the policy's last, 1 on the value's, biases 0:
    an orthogonal matrix W with gain g has W W^T = g^2 I (rows <= columns) or W^T W = g^2 I."""
    torch.manual_seed(0)
    model = ActorCritic(shape, 6, NetConfig(init="orthogonal"))
    convs = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    policy_last, value_last = model.policy[-1], model.value.head if len(shape) == 3 else model.value[-1]
    for layer in convs:
        w = layer.weight.reshape(layer.weight.shape[0], -1)
        gain = 0.01 if layer is policy_last else 1.0 if layer is value_last else 2**0.5
        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        assert torch.allclose(gram, gain**2 * torch.eye(len(gram)), atol=1e-4 * max(gain**2, 1e-2)), layer
        assert not layer.bias.any()
    if shape == ATARI:  # the reason for it: the Nature features of the input's scale, not ~25x smaller
        obs = frames(8)
        torch.manual_seed(0)
        default = ActorCritic(shape, 6, NetConfig())
        assert model.policy[0](obs).abs().mean() > 10 * default.policy[0](obs).abs().mean()


def test_a_bad_init_is_one_line():
    with pytest.raises(ValueError, match="net.init must be one of"):
        NetConfig(init="xavier")


def test_truncated_normal_constant_is_the_std_of_a_unit_normal_cut_at_two():
    """flax's 0.8796...: Var = 1 - 2 * 2 * pdf(2) / (cdf(2) - cdf(-2)) for a unit normal cut at +-2."""
    pdf2 = math.exp(-2.0) / math.sqrt(2 * math.pi)
    mass = math.erf(2 / math.sqrt(2))
    assert TRUNCATED_NORMAL_STD == pytest.approx(math.sqrt(1 - 4 * pdf2 / mass), rel=1e-12)


@pytest.mark.parametrize("shape", [(4, 10, 10), (7,), ATARI])
def test_flax_init_is_lecun_normal_with_small_positive_biases(shape):
    """Every weight from a normal cut at +-2 std with variance 1 / fan_in, every bias in [0, 0.05):
    flax's ``Dense`` defaults with gymnax-blines' ``bias_init``; no layer scaled down."""
    torch.manual_seed(0)
    model = ActorCritic(shape, 6, NetConfig(init="flax", hidden=(256, 256)))
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    for layer in layers:
        w = layer.weight.reshape(layer.weight.shape[0], -1)
        target = 1 / math.sqrt(w.shape[1])
        assert w.abs().max() <= 2 * target / TRUNCATED_NORMAL_STD + 1e-6, layer
        if w.numel() >= 4096:  # the sample std is within 3% of the target (its error ~ 1/sqrt(2n))
            assert w.std().item() == pytest.approx(target, rel=0.03), layer
        assert 0.0 <= layer.bias.min() and layer.bias.max() < 0.05, layer
        if layer.bias.numel() >= 256:  # uniform in [0, 0.05): mean 0.025, sd of the mean <= 0.0009
            assert layer.bias.mean().item() == pytest.approx(0.025, abs=0.005), layer
