"""Observation encoders (distrl/nn/encoders.py) and every network head built over them.

Parameter counts are worked out by hand from each paper's layer list (``in * out * k * k + out``
for a conv, ``in * out + out`` for a linear layer), so a layer added, dropped or resized fails here.
The image heads run on MinAtar-like ``[B, 4, 10, 10]`` bool batches, forward and backward (nature,
which cannot take 10x10, on its smallest image, 36x36). Quick tier: no processes, no training.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import distrl
from distrl.runtime.checkpoint import save_checkpoint
from distrl.cli.options import build_config, experiment_config, make_parser
from distrl.config import ENCODER_NAMES, NetConfig, override
from distrl.data import keys
from distrl.nn.encoders import ENCODERS, ImageEncoder, as_shape, make_encoder, resolve_encoder, to_float
from distrl.nn.models import ActorCritic, QNetwork, clip_towers
from distrl.nn.recurrent import RecurrentActorCritic, UnrolledCore
from distrl.nn.numpy_policy import NumpyPolicy

MINATAR = (4, 10, 10)  # MinAtar's Breakout, channels first
ATARI = (4, 84, 84)  # four stacked 84x84 frames
IMAGE = {"minatar": MINATAR, "impala": MINATAR, "nature": (4, 36, 36)}  # nature's smallest image


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def encoder(name: str, shape) -> torch.nn.Module:
    return make_encoder(shape, NetConfig(encoder=name))


def images(*lead: int, shape=MINATAR, seed: int = 0) -> torch.Tensor:
    """A MinAtar-like batch ``[*lead, *shape]`` of bool channels, about one cell in five set."""
    return torch.rand(*lead, *shape, generator=torch.Generator().manual_seed(seed)) < 0.2


def impala_convs(c: int) -> int:
    """The conv stacks' parameters: per stack a 3x3 conv c_in -> ch and two residual blocks of two
    3x3 ch -> ch convs, for ch = 16, 32, 32."""
    total = 0
    for ch in (16, 32, 32):
        total += c * ch * 9 + ch + 4 * (ch * ch * 9 + ch)
        c = ch
    return total


# 1. the layer lists, counted by hand
COUNTS = [
    ("mlp", (7,), 7 * 64 + 64 + 64 * 64 + 64),  # net.hidden (64, 64)
    ("minatar", MINATAR, 4 * 16 * 3 * 3 + 16 + (16 * 8 * 8) * 128 + 128),  # 131_792
    ("minatar", (6, 10, 12), 6 * 16 * 3 * 3 + 16 + (16 * 8 * 10) * 128 + 128),  # H and W apart
    ("impala", MINATAR, impala_convs(4) + (32 * 2 * 2) * 256 + 256),  # 10 -> 5 -> 3 -> 2; 130_768
    ("impala", ATARI, impala_convs(4) + (32 * 11 * 11) * 256 + 256),  # 84 -> 42 -> 21 -> 11; 1_089_232
    (
        "nature",
        ATARI,
        (4 * 32 * 8 * 8 + 32) + (32 * 64 * 4 * 4 + 64) + (64 * 64 * 3 * 3 + 64) + (64 * 7 * 7) * 512 + 512,
    ),  # 84 -> 20 -> 9 -> 7; 1_684_128
    ("nature", (4, 36, 36), 8224 + 32832 + 36928 + 64 * 1 * 1 * 512 + 512),  # 36 -> 8 -> 3 -> 1
]


@pytest.mark.parametrize("name,shape,count", COUNTS)
def test_parameter_counts_are_the_papers(name, shape, count):
    enc = encoder(name, shape)
    assert n_params(enc) == count
    assert enc.out_features == {"mlp": 64, "minatar": 128, "nature": 512, "impala": 256}[name]


@pytest.mark.parametrize("name,shape", [("mlp", (7,)), *IMAGE.items()])
def test_any_leading_dims_in_and_out(name, shape):
    enc = encoder(name, shape)
    x = torch.randn(6, 5, *shape)
    out = enc(x)
    assert out.shape == (6, 5, enc.out_features)
    torch.testing.assert_close(enc(x.flatten(0, 1)), out.flatten(0, 1))  # [B, T] is [B*T], reshaped
    assert enc(x[0, 0]).shape == (enc.out_features,)  # and one observation without a batch


@pytest.mark.parametrize("name", list(IMAGE))
def test_uint8_is_scaled_inside_and_bool_is_zero_one(name):
    enc = encoder(name, IMAGE[name])
    pixels = torch.randint(0, 256, (3, *IMAGE[name]), dtype=torch.uint8)
    torch.testing.assert_close(enc(pixels), enc(pixels.float() / 255.0))
    cells = images(3, shape=IMAGE[name])
    torch.testing.assert_close(enc(cells), enc(cells.float()))
    floats = torch.randn(3, *IMAGE[name]) * 5  # float goes in as it is: no second scaling
    torch.testing.assert_close(enc(floats), enc.fc(enc.conv(floats)))
    with pytest.raises(ValueError, match="uint8 .* bool or float observations, got torch.int64"):
        enc(pixels.long())
    assert to_float(pixels).dtype == torch.float32 and to_float(floats) is floats


def test_a_uint8_batch_runs_end_to_end_and_reaches_the_encoder_as_uint8():
    model = ActorCritic(MINATAR, 3, NetConfig(encoder="minatar"))
    seen = []
    model.policy[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    obs = torch.randint(0, 256, (8, 2, *MINATAR), dtype=torch.uint8)
    logits, value = model(obs)
    (logits.logsumexp(-1).sum() + value.square().sum()).backward()
    assert seen == [torch.uint8] and logits.shape == (8, 2, 3) and value.shape == (8, 2, 1)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


# 2. choosing one
@pytest.mark.parametrize(
    "shape,name",
    [
        ((4,), "mlp"),
        (MINATAR, "minatar"),
        ((1, 16, 16), "minatar"),
        ((3, 16, 40), "impala"),
        ((3, 24, 24), "impala"),
        ((3, 35, 64), "impala"),
        ((3, 36, 36), "nature"),
        (ATARI, "nature"),
    ],
)
def test_auto_picks_by_shape(shape, name):
    assert resolve_encoder(shape) == name
    assert resolve_encoder(shape, "impala") == "impala"  # a name is taken as given
    assert type(make_encoder(shape, NetConfig())) is ENCODERS[name]


@pytest.mark.parametrize(
    "name,shape,message",
    [
        ("auto", (10, 10), "encoder auto: observations of shape (10, 10) are neither flat"),
        ("auto", (1, 4, 10, 10), "neither flat [F] nor images [C, H, W]"),
        ("nature", MINATAR, "encoder nature takes images [C, H, W] of at least 36x36, got shape (4, 10, 10)"),
        (
            "minatar",
            (4,),
            "encoder minatar takes images [C, H, W] of at least 3x3, got shape (4,): set net.encoder=mlp",
        ),
        ("minatar", (4, 2, 10), "at least 3x3"),
        ("impala", (16,), "encoder impala takes images"),
        ("mlp", (4, 0, 10), "encoder mlp takes observations of positive sizes, got shape (4, 0, 10)"),
    ],
)
def test_a_shape_an_encoder_cannot_take_is_a_one_line_error(name, shape, message):
    with pytest.raises(ValueError) as err:
        make_encoder(shape, NetConfig(encoder=name))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_mlp_by_name_flattens_an_image_into_separate_towers():
    """``net.encoder=mlp`` on MinAtar's ``[4, 10, 10]`` (gymnax's ``flatten_3d``, vecenv's ``minatar_gymnax``):
    separate policy and value MLPs on the 400 flattened cells, counted by hand; the same numbers as
    a flat MLP given the flattened grid; the shape kept for reloading; numpy actors leave it to torch."""
    net = NetConfig(encoder="mlp", hidden=(256, 256), activation="relu")
    model = ActorCritic(MINATAR, 3, net)
    tower = 400 * 256 + 256 + 256 * 256 + 256
    assert n_params(model.policy) == tower + 256 * 3 + 3 and n_params(model.value) == tower + 256 + 1
    assert n_params(model) == 2 * tower + 256 * 4 + 4  # no shared torso
    flat = ActorCritic((400,), 3, net)
    flat.load_state_dict(
        {
            k.replace(".1.", ".0.").replace(".3.", ".2.").replace(".5.", ".4."): v
            for k, v in model.state_dict().items()
            if "obs_shape" not in k
        }
    )
    obs = images(2, 5)
    out, value = model(obs)
    assert out.shape == (2, 5, 3) and value.shape == (2, 5, 1)
    flat_out, flat_value = flat(obs.reshape(2, 5, 400).float())
    assert torch.equal(out, flat_out) and torch.equal(value, flat_value)
    assert model.policy.obs_shape.tolist() == list(MINATAR) and not NumpyPolicy.supports(model.policy)
    assert "obs_shape" not in dict(flat.named_buffers()) and resolve_encoder(MINATAR) == "minatar"


def test_layer_norm_sits_between_each_hidden_linear_and_its_activation():
    """``net.layer_norm``: the tower computes ``relu(LN(W x + b))`` per hidden width, by hand here; off,
    the layout (and so every saved state dict) is the plain one."""
    torch.manual_seed(0)
    net = NetConfig(hidden=(16, 8), activation="relu", layer_norm=True)
    q = QNetwork((5,), 3, net).q
    assert [type(m).__name__ for m in q] == ["Linear", "LayerNorm", "ReLU"] * 2 + ["Linear"]
    x = torch.randn(7, 5)
    h = x
    for linear, norm in ((q[0], q[1]), (q[3], q[4])):
        z = linear(h)
        mean, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
        h = ((z - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias).clamp(min=0)
    torch.testing.assert_close(q(x), q[6](h))
    plain = QNetwork((5,), 3, NetConfig(hidden=(16, 8), activation="relu")).q
    assert [type(m).__name__ for m in plain] == ["Linear", "ReLU"] * 2 + ["Linear"]


def test_load_policy_rebuilds_a_layer_normed_q_network(tmp_path):
    torch.manual_seed(3)
    net = NetConfig(hidden=(32, 32), activation="relu", layer_norm=True)
    model = QNetwork((4,), 2, net, dueling=True)
    with torch.no_grad():
        model.q[-1].advantage.weight.mul_(300)  # decisive, so a wrong network would pick other actions
    cfg = override(experiment_config("apex", "default"), **{"net.hidden": (32, 32), "net.layer_norm": True})
    (tmp_path / "config.json").write_text(cfg.to_json())
    save_checkpoint(tmp_path, 1, {"model": model.state_dict(), "config": cfg.to_dict()})
    obs = torch.randn(64, 4, generator=torch.Generator().manual_seed(7))
    got = distrl.load_policy(tmp_path)(TensorDict({keys.OBSERVATION: obs}, batch_size=[64]))[keys.ACTION]
    with torch.no_grad():
        want = model(obs).argmax(-1)
    assert got.shape == (64, 2) and torch.equal(got.argmax(-1), want)  # one-hot actions, as CartPole's spec


def test_images_in_the_wrong_layout_are_refused():
    enc = encoder("minatar", MINATAR)
    with pytest.raises(ValueError, match=r"takes observations \[\*B, 4, 10, 10\], got \[2, 10, 10, 4\]"):
        enc(images(2).permute(0, 2, 3, 1))  # MinAtar's own [H, W, C], not transposed


def test_names_config_and_command_line_agree():
    assert set(ENCODERS) == set(ENCODER_NAMES) - {"auto"}
    assert all(issubclass(ENCODERS[n], ImageEncoder) for n in IMAGE)
    assert NetConfig().encoder == "auto" and as_shape(4) == (4,) and as_shape(torch.Size(MINATAR)) == MINATAR
    with pytest.raises(ValueError, match="net.encoder must be one of"):
        NetConfig(encoder="resnet")
    args = make_parser().parse_args(["impala", "--set", "net.encoder=impala", "--set", "net.hidden=32"])
    assert build_config(args).net == NetConfig(hidden=(32,), encoder="impala")
    with pytest.raises(ValueError, match="--set net.encoder=vit: net.encoder must be one of"):
        build_config(make_parser().parse_args(["impala", "--set", "net.encoder=vit"]))


# 3. every head over every image encoder
def grads_everywhere(model: torch.nn.Module) -> bool:
    return all(
        p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0 for p in model.parameters()
    )


def partition(groups, model) -> bool:
    """Each parameter in exactly one group, and every parameter in one."""
    ids = [id(p) for g in groups for p in g]
    return len(ids) == len(set(ids)) and set(ids) == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("name", list(IMAGE))
def test_actor_critic_shares_one_torso(name):
    torch.manual_seed(0)
    model = ActorCritic(IMAGE[name], 5, NetConfig(encoder=name))
    obs = images(16, 3, shape=IMAGE[name])
    logits, value = model(obs)
    assert logits.shape == (16, 3, 5) and value.shape == (16, 3, 1)
    torch.testing.assert_close(logits, model.policy(obs))
    torch.testing.assert_close(value, model.value(obs))
    (logits.logsumexp(-1).sum() + value.square().sum()).backward()
    assert grads_everywhere(model)
    groups = model.tower_parameters()  # the torso, the policy head, the value head
    assert len(groups) == 3 and partition(groups, model) and groups[0] == list(model.policy[0].parameters())
    for p in model.parameters():
        p.grad.mul_(1e3)
    clip_towers(groups, 0.5)
    for group in groups:
        assert torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in group])) <= 0.5 + 1e-4
    # the torso is in the state dict once, under the policy; a copy loaded from it is the same network
    state = model.state_dict()
    assert not any(k.startswith("value.") and "head" not in k for k in state)
    assert state["policy.0.obs_shape"].tolist() == list(IMAGE[name])
    other = ActorCritic(IMAGE[name], 5, NetConfig(encoder=name))
    other.load_state_dict(state)
    torch.testing.assert_close(other(obs)[1], value)


@pytest.mark.parametrize("name", list(IMAGE))
def test_q_network(name):
    model = QNetwork(IMAGE[name], 6, NetConfig(encoder=name))
    q = model(images(32, shape=IMAGE[name]))
    assert q.shape == (32, 6)
    q.max(-1).values.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert n_params(model) == n_params(model.q[0]) + model.q[0].out_features * 6 + 6


@pytest.mark.parametrize("name", list(IMAGE))
def test_recurrent_core(name):
    torch.manual_seed(0)
    model = RecurrentActorCritic(IMAGE[name], 4, NetConfig(encoder=name), core_size=16)
    assert model.obs_norm is None  # images are not standardised
    B, T = 3, 5
    obs, next_obs = images(B, T, shape=IMAGE[name]), images(B, T, shape=IMAGE[name], seed=1)
    done = torch.zeros(B, T, dtype=torch.bool)
    done[0, 2] = True
    core = UnrolledCore(model, model.initial_state(B), done)
    logits, value = core(obs)
    next_value = core.value(next_obs)
    assert logits.shape == (B, T, 4) and value.shape == next_value.shape == (B, T, 1)
    with torch.no_grad():  # the unroll is the step, one observation at a time (the reset after step 2 too)
        state = model.initial_state(B)
        for t in range(T):
            if t == 3:
                state[0] = 0.0
            step_logits, step_value, state = model.step(obs[:, t], state)
            torch.testing.assert_close(step_logits, logits[:, t])
            torch.testing.assert_close(step_value, value[:, t])
    (logits.logsumexp(-1).sum() + value.square().sum() + next_value.square().sum()).backward()
    assert grads_everywhere(model)
    groups = model.tower_parameters()  # the torso, then each tower with its head
    assert len(groups) == 3 and partition(groups, model) and groups[0] == list(model.torso.parameters())


@pytest.mark.parametrize("name", list(IMAGE))
def test_act_and_evaluate_agree_for_both_heads(name):
    """What an on-policy learner calls (vecenv's PPO: ``act`` in the rollout, ``evaluate`` in the
    update), over a shared torso, for logits and for the Gaussian."""
    shape, net = IMAGE[name], NetConfig(encoder=name, init_log_std=-0.5)
    obs = images(10, shape=shape)
    discrete = ActorCritic(shape, 3, net)
    with torch.no_grad():
        action, log_prob = discrete.act(obs)
    new_log_prob, entropy, _ = discrete.evaluate(obs, action)
    torch.testing.assert_close(new_log_prob, log_prob)
    (new_log_prob.sum() + entropy.sum() + discrete.value(obs).sum()).backward()
    assert grads_everywhere(discrete) and discrete.greedy(obs).shape == (10,)
    continuous = ActorCritic(shape, None, net, action_dim=2)
    with torch.no_grad():  # as a rollout stores them
        action, log_prob = continuous.act(obs)
    new_log_prob, entropy, _ = continuous.evaluate(obs, action)
    torch.testing.assert_close(new_log_prob, log_prob)
    (new_log_prob.sum() + continuous.value(obs).sum()).backward()
    assert grads_everywhere(continuous) and continuous.greedy(obs).shape == (10, 2)
    assert continuous.obs_norm is None  # images are scaled by their encoder


def test_the_numpy_policy_refuses_an_image_policy_in_one_line():
    policy = ActorCritic(MINATAR, 3).policy
    assert not NumpyPolicy.supports(policy)
    with pytest.raises(ValueError, match="got MinAtarEncoder .an image encoder") as err:
        NumpyPolicy(policy, 0)
    assert "\n" not in str(err.value)


# 4. a checkpoint of an image network (mlp: the image flattened), back as a TorchRL actor
@pytest.mark.parametrize(
    "recipe,name",
    [("impala", "minatar"), ("impala", "impala"), ("apex", "auto"), ("vecenv", "auto"), ("vecenv", "mlp")],
)
def test_load_policy_rebuilds_an_image_network(tmp_path, recipe, name):
    torch.manual_seed(3)
    net = NetConfig(encoder=name)
    model = QNetwork(MINATAR, 3, net, dueling=True) if recipe == "apex" else ActorCritic(MINATAR, 3, net)
    head = model.q[-1].advantage if recipe == "apex" else model.policy[-1]  # apex's default head is dueling
    with torch.no_grad():
        head.weight.mul_(300)  # decisive, so a wrong network would pick other actions
    cfg = experiment_config(recipe, "debug")  # its net as the model's (the mlp's widths are the config's)
    cfg = override(cfg, **{"run.env": "MinAtar/Breakout-v1", "net.encoder": name, "net.hidden": net.hidden})
    cfg = override(cfg, **{"net.activation": net.activation})
    (tmp_path / "config.json").write_text(cfg.to_json())
    save_checkpoint(tmp_path, 1, {"model": model.state_dict(), "config": cfg.to_dict()})
    policy = distrl.load_policy(tmp_path)
    obs = images(64, seed=7)
    # one-hot actions: this checkpoint records no env encoding; bool observations go in as they are
    got = policy(TensorDict({keys.OBSERVATION: obs}, batch_size=[64]))[keys.ACTION].argmax(-1)
    with torch.no_grad():
        want = (model(obs) if recipe == "apex" else model.policy(obs)).argmax(-1)
    assert torch.equal(got, want)


def test_load_policy_rebuilds_an_atari_network_with_its_pixel_statistics(tmp_path):
    """sf's atari preset: per-pixel statistics inside the Nature torso (policy.0.norm), value targets
    normalised; the policy loaded back standardises the pixels as the trained one did."""
    torch.manual_seed(4)
    cfg = override(experiment_config("sf", "atari"), **{"net.precision": "float32"})  # the same arithmetic here
    model = ActorCritic((4, 84, 84), 6, cfg.net)
    assert model.obs_norm is not None and model.value_norm is not None
    with torch.no_grad():  # statistics far from the identity: a policy without them picks other actions
        model.obs_norm.update_batch(torch.rand(64, 4, 84, 84) * torch.linspace(0, 255, 84))
        model.policy[-1].weight.mul_(300)
    (tmp_path / "config.json").write_text(cfg.to_json())
    save_checkpoint(tmp_path, 1, {"model": model.state_dict(), "config": cfg.to_dict()})
    policy = distrl.load_policy(tmp_path)
    obs = (torch.rand(32, 4, 84, 84) * 255).to(torch.uint8)
    got = policy(TensorDict({keys.OBSERVATION: obs}, batch_size=[32]))[keys.ACTION].argmax(-1)
    with torch.no_grad():
        want = model.policy(obs).argmax(-1)
        torso = model.policy[0]
        norm, torso.norm = torso.norm, None
        unnormalised = model.policy(obs).argmax(-1)
        torso.norm = norm
    assert not torch.equal(want, unnormalised)  # these weights play otherwise without the statistics
    assert torch.equal(got, want)
