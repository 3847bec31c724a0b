"""Observation encoders, chosen by ``net.encoder``: ``forward(obs [*B, *obs_shape]) -> [*B, out_features]``.

Every network head (:class:`distrl.nn.models.ActorCritic`, :class:`distrl.nn.models.QNetwork`, the
recurrent core) starts with one. Each is a small named module with its paper's layer list in its
docstring. ``*B`` is any number of leading dims (``[B]``, ``[B, T]``): an image encoder flattens
them into one batch for its convolutions and restores them after.

========  ========================  ======================================================
name      observation               layers
========  ========================  ======================================================
mlp       flat ``[F]`` (or any,     ``Linear`` + activation per ``net.hidden`` width
          flattened: by name only)
minatar   ``[C, H, W]``, H, W >= 3  Young & Tian 2019 (MinAtar)
nature    ``[C, H, W]``, H, W >= 36 Mnih et al. 2015 (the DQN of Nature)
impala    ``[C, H, W]``             Espeholt et al. 2018 (IMPALA's deep residual network)
========  ========================  ======================================================

``auto`` (:func:`resolve_encoder`, the one place it is decided): flat -> mlp; images up to 16x16
-> minatar (MinAtar is 10x10); at least 36x36 -> nature (Atari's 84x84); in between -> impala,
because nature's strides leave nothing of an image under 36x36 and impala's padded convolutions
take any size.

Input dtype: images travel as uint8 (or bool, as MinAtar's) up to the network's device and become
float in the encoder's first line (:func:`to_float`): uint8 / 255, bool as 0/1, float as is. A
uint8 image is a quarter of float32's bytes through queues, replay and host-to-device copies;
cleanrl's ``ppo_atari_envpool.py`` divides by 255 inside the network for the same reason.

The image encoders use ReLU and their paper's widths and PyTorch's default initialisation;
``net.hidden`` and ``net.activation`` shape the mlp encoder only. Each image encoder keeps its
``obs_shape`` as an int64 buffer, so a checkpoint says what it was built for (read back by
:mod:`distrl.nn.trained_policy`); the mlp encoder keeps none, so its state dict is the one distrl
always wrote.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import torch
from torch import nn

from distrl.nn.activations import ACTIVATIONS
from distrl.config import NetConfig

NATURE_MIN = 36  #: nature's smallest image side: 8x8 stride 4, 4x4 stride 2, 3x3 leave 1 pixel of 36
MINATAR_MAX = 16  #: auto picks minatar for images whose sides are all at most this


def as_shape(obs_shape: int | Sequence[int]) -> tuple[int, ...]:
    """``obs_shape`` as a tuple of ints; an ``int`` ``F`` (the older ``obs_dim``) means ``(F,)``."""
    if isinstance(obs_shape, int):
        return (obs_shape,)
    return tuple(int(d) for d in obs_shape)


def to_float(obs: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``obs`` as floats on its own device: uint8 divided by 255, bool as 0/1, float unchanged."""
    if obs.is_floating_point():
        return obs
    if obs.dtype == torch.uint8:
        return obs.to(dtype).div_(255.0)
    if obs.dtype == torch.bool:
        return obs.to(dtype)
    raise ValueError(f"encoders take uint8 (scaled by 1/255), bool or float observations, got {obs.dtype}")


class MLPEncoder(nn.Sequential):
    """Flat observations ``[*B, F] -> [*B, hidden[-1]]``: ``Linear, activation`` per ``net.hidden`` width.

    With ``head``, a last ``Linear(hidden[-1], head)`` without activation follows: that is a whole
    policy, value or Q tower, laid out as TorchRL's ``MLP`` lays it out (``Linear`` layers at 0, 2,
    4, ...), built in the same order, so its state dict and its initial weights under a seed are
    those of every earlier distrl release. ``net.layer_norm`` puts a ``LayerNorm`` between each hidden
    ``Linear`` and its activation (the layout is then ``Linear, LayerNorm, activation`` per width).

    Images ``[*B, C, H, W]`` (only when ``net.encoder=mlp`` names it; ``auto`` gives them a conv
    encoder) start with an ``nn.Flatten`` to ``[*B, C*H*W]``: gymnax-blines' MinAtar PPO network
    (``flatten_3d``, the ``minatar_gymnax`` preset of vecenv). The shape is then kept as an
    ``obs_shape`` buffer, as the image encoders keep theirs, so a checkpoint reloads with it.

    ``net.precision`` (:func:`autocast_dtype`): with bfloat16 the hidden layers run under autocast
    and the head in float32 (on this project's CPUs a (256, 256) tower's forward and backward over
    256 samples costs half of float32's: SAC's learner, ``docs/apex.md``).
    """

    def __init__(self, obs_shape: Sequence[int], net: NetConfig, head: int | None = None):
        shape = as_shape(obs_shape)
        if not shape or min(shape) < 1:
            raise ValueError(f"encoder mlp takes observations of positive sizes, got shape {shape}")
        flat = math.prod(shape)
        act, widths = ACTIVATIONS[net.activation], [flat, *net.hidden]
        layers: list[nn.Module] = [nn.Flatten(-len(shape))] if len(shape) > 1 else []
        for n_in, n_out in zip(widths, widths[1:]):
            layers += [nn.Linear(n_in, n_out), *([nn.LayerNorm(n_out)] if net.layer_norm else []), act()]
        if head is not None:
            layers.append(nn.Linear(widths[-1], head))
        super().__init__(*layers)
        self.in_features, self.out_features = flat, widths[-1] if head is None else head
        self.precision, self.has_head = net.precision, head is not None
        if len(shape) > 1:  # what distrl.nn.trained_policy reads back (a flat tower's state dict stays as it was)
            self.register_buffer("obs_shape", torch.tensor(shape, dtype=torch.int64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = to_float(obs)
        dtype = autocast_dtype(getattr(self, "precision", "float32"), x.device.type)  # (pickles before it: float32)
        if dtype is None:
            return super().forward(x)
        # bfloat16: the hidden layers under autocast, the head (when there is one) in float32 on float32
        # features, so that a Q-value or a log-std keeps float32's resolution (bfloat16 rounds a Q of 500 to +-2)
        layers = list(self)
        head = layers.pop() if self.has_head else None
        with torch.autocast(x.device.type, dtype=dtype):
            for layer in layers:
                x = layer(x)
        x = x.float()
        return head(x) if head is not None else x


@functools.cache
def native_bfloat16(device_type: str) -> bool:
    """Whether ``device_type`` (``cpu``, ``cuda``) computes bfloat16 convolutions and matmuls in
    hardware: oneDNN's check for AVX512-BF16 or AMX on a CPU (elsewhere bfloat16 is emulated and
    slower than float32), ``torch.cuda.is_bf16_supported`` on a GPU."""
    if device_type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return False


def autocast_dtype(precision: str, device_type: str) -> torch.dtype | None:
    """The dtype an image encoder autocasts to under ``net.precision`` on ``device_type``: None
    (float32), or ``torch.bfloat16`` (``bfloat16``; ``auto`` where :func:`native_bfloat16`)."""
    if precision == "bfloat16" or (precision == "auto" and native_bfloat16(device_type)):
        return torch.bfloat16
    return None


class ImageEncoder(nn.Module):
    """What every image encoder does around its layers: ``obs [*B, C, H, W]`` (uint8, bool or float)
    -> ``fc(conv(x)) [*B, out_features]``, with ``conv`` ending in a flatten. Subclasses build ``conv``
    and ``fc`` and check the shape with :meth:`_check`.

    ``net.precision`` (:func:`autocast_dtype`): with bfloat16 the layers run under autocast and the
    features come out float32, so every head, loss and optimizer step after them is float32. Why
    here and not around a whole loss: the learner, inference and evaluation all call this, so the
    behaviour policy and the policy trained are computed with the same arithmetic, and a policy's
    log-probabilities keep float32's precision (PPO's ratio is a difference of them). On this
    project's 2-core CPUs (AVX512-BF16) a Nature training step costs 0.45x float32's
    (``docs/atari.md``)."""

    name = ""

    def __init__(self, obs_shape: Sequence[int], net: NetConfig = NetConfig()):
        super().__init__()
        self.in_shape = as_shape(obs_shape)
        self.precision = net.precision
        self.register_buffer("obs_shape", torch.tensor(self.in_shape, dtype=torch.int64))
        #: an :class:`~distrl.nn.obs_norm.ObsNorm` over the raw pixels (``net.obs_norm=on``; set by the model)
        self.norm: nn.Module | None = None

    def _check(self, min_side: int) -> None:
        if len(self.in_shape) != 3 or min(self.in_shape[1:]) < min_side:
            raise ValueError(
                f"encoder {self.name} takes images [C, H, W] of at least {min_side}x{min_side}, "
                f"got shape {self.in_shape}"
                + ("" if len(self.in_shape) == 3 else ": set net.encoder=mlp (or auto) for flat observations")
            )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.norm is not None:  # standardised pixels, floats: to_float leaves them as they are
            obs = self.norm(obs)
        x = to_float(obs, self.fc[0].weight.dtype)  # first: what travelled is the uint8 image
        if x.shape[-3:] != self.in_shape:  # e.g. [H, W, C] from an env that was not transposed
            raise ValueError(
                f"encoder {self.name} takes observations [*B, {', '.join(map(str, self.in_shape))}], "
                f"got {list(x.shape)}"
            )
        lead = x.shape[:-3]
        dtype = autocast_dtype(self.precision, x.device.type)
        with torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            y = self.fc(self.conv(x.reshape(-1, *self.in_shape))).float()  # float32 out: a no-op without autocast
        return y.reshape(*lead, self.out_features)


class MinAtarEncoder(ImageEncoder):
    """Young & Tian 2019 (MinAtar), the network of its reference DQN and actor-critic agents:

    * ``Conv2d(C, 16, 3x3, stride 1)``, ReLU -> ``[16, H-2, W-2]``
    * flatten -> ``[16 (H-2) (W-2)]`` (1024 on MinAtar's 10x10)
    * ``Linear(16 (H-2) (W-2), 128)``, ReLU -> ``[128]``

    In MinAtar's DQN the 128 units are the hidden layer before the Q head; each head puts its own
    ``Linear`` over them.
    """

    name = "minatar"

    def __init__(self, obs_shape: Sequence[int], net: NetConfig = NetConfig()):
        super().__init__(obs_shape, net)
        self._check(3)
        c, h, w = self.in_shape
        self.conv = nn.Sequential(nn.Conv2d(c, 16, 3, stride=1), nn.ReLU(), nn.Flatten())
        self.out_features = 128
        self.fc = nn.Sequential(nn.Linear(16 * (h - 2) * (w - 2), 128), nn.ReLU())


class NatureEncoder(ImageEncoder):
    """Mnih et al. 2015 (the DQN of Nature), sizes for Atari's 84x84:

    * ``Conv2d(C, 32, 8x8, stride 4)``, ReLU -> ``[32, 20, 20]``
    * ``Conv2d(32, 64, 4x4, stride 2)``, ReLU -> ``[64, 9, 9]``
    * ``Conv2d(64, 64, 3x3, stride 1)``, ReLU -> ``[64, 7, 7]``
    * flatten -> ``[3136]``
    * ``Linear(3136, 512)``, ReLU -> ``[512]``
    """

    name = "nature"

    def __init__(self, obs_shape: Sequence[int], net: NetConfig = NetConfig()):
        super().__init__(obs_shape, net)
        self._check(NATURE_MIN)
        c, h, w = self.in_shape
        for k, s in ((8, 4), (4, 2), (3, 1)):
            h, w = (h - k) // s + 1, (w - k) // s + 1
        self.conv = nn.Sequential(
            nn.Conv2d(c, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.out_features = 512
        self.fc = nn.Sequential(nn.Linear(64 * h * w, 512), nn.ReLU())


class ResidualBlock(nn.Module):
    """IMPALA's residual block: ``x + conv(relu(conv(relu(x))))``, both 3x3, stride 1, padded to keep
    ``[ch, H, W]``."""

    def __init__(self, ch: int):
        super().__init__()
        self.conv0 = nn.Conv2d(ch, ch, 3, padding=1)
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaEncoder(ImageEncoder):
    """Espeholt et al. 2018 (IMPALA), the deep residual network of its figure 3:

    * for ``ch`` in 16, 32, 32:
      ``Conv2d(ch_in, ch, 3x3, stride 1, padding 1)`` -> ``[ch, H, W]``;
      ``MaxPool2d(3x3, stride 2, padding 1)`` -> ``[ch, ceil(H/2), ceil(W/2)]``;
      two :class:`ResidualBlock` of ``ch``
    * ReLU, flatten -> ``[32 h w]``, ``h = ceil(H/8)`` (2 on 10x10: 128; 11 on 84x84: 3872)
    * ``Linear(32 h w, 256)``, ReLU -> ``[256]`` (the paper's LSTM, when there is one, comes after)
    """

    name = "impala"

    def __init__(self, obs_shape: Sequence[int], net: NetConfig = NetConfig()):
        super().__init__(obs_shape, net)
        self._check(1)
        c, h, w = self.in_shape
        layers = []
        for ch in (16, 32, 32):
            layers += [
                nn.Conv2d(c, ch, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                ResidualBlock(ch),
                ResidualBlock(ch),
            ]
            c, h, w = ch, (h - 1) // 2 + 1, (w - 1) // 2 + 1
        self.conv = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
        self.out_features = 256
        self.fc = nn.Sequential(nn.Linear(c * h * w, 256), nn.ReLU())


#: ``net.encoder`` name -> its class (every name of :data:`distrl.config.ENCODER_NAMES` but auto)
ENCODERS: dict[str, type[nn.Module]] = {
    "mlp": MLPEncoder,
    "minatar": MinAtarEncoder,
    "nature": NatureEncoder,
    "impala": ImpalaEncoder,
}


def resolve_encoder(obs_shape: int | Sequence[int], name: str = "auto") -> str:
    """The encoder ``name`` means for observations of ``obs_shape``: itself, or what ``auto`` picks
    (flat -> mlp; images up to 16x16 -> minatar; at least 36x36 -> nature; else impala)."""
    if name != "auto":
        return name
    shape = as_shape(obs_shape)
    if len(shape) == 1:
        return "mlp"
    if len(shape) == 3:
        if max(shape[1:]) <= MINATAR_MAX:
            return "minatar"
        return "nature" if min(shape[1:]) >= NATURE_MIN else "impala"
    raise ValueError(
        f"encoder auto: observations of shape {shape} are neither flat [F] nor images [C, H, W]; "
        "reshape them in the env"
    )


def make_encoder(obs_shape: int | Sequence[int], net: NetConfig) -> nn.Module:
    """The encoder ``net.encoder`` names (:func:`resolve_encoder` for auto) for ``obs_shape``:
    ``forward(obs [*B, *obs_shape]) -> [*B, out_features]``. ``ValueError`` in one line when it
    cannot take the shape."""
    name = resolve_encoder(obs_shape, net.encoder)
    if name not in ENCODERS:
        raise ValueError(f"net.encoder must be one of auto, {', '.join(ENCODERS)}, got {name!r}")
    return ENCODERS[name](as_shape(obs_shape), net)
