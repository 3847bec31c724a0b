"""The activations distrl's MLPs build with, by ``net.activation`` name, and the fast CPU tanh.

Its own module so that both :mod:`distrl.nn.encoders` (which builds the MLPs) and :mod:`distrl.nn.models`
(which builds the heads over them) import it without importing each other. ``distrl.nn.models``
re-exports both names: pickles of exported policies name ``distrl.nn.models.Tanh``.
"""

from __future__ import annotations

import torch
from torch import nn


class _SigmoidTanh(torch.autograd.Function):
    """``tanh(x) = 2 sigmoid(2x) - 1``, with tanh's own backward ``grad (1 - y^2)``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x * 2).mul_(2).sub_(1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class Tanh(nn.Tanh):
    """``nn.Tanh``, computed on CPU as ``2 sigmoid(2x) - 1``.

    Why: torch's CPU tanh kernel costs 4.5 ns an element on these machines, its sigmoid 1.3 ns:
    the 2x64 actor-critic's forward on sf's 2048-row learner batch takes 0.73 ms with this tanh
    against 1.67 ms with ``nn.Tanh`` (``python -m experiments.bench_learner``). The same function to float32
    rounding (1e-7 absolute); elsewhere (CUDA) ``torch.tanh`` itself. A subclass, so code that
    asks ``isinstance(m, nn.Tanh)`` still sees a tanh.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            return torch.tanh(x)
        if x.requires_grad and torch.is_grad_enabled():
            return _SigmoidTanh.apply(x)
        return torch.sigmoid(x * 2).mul_(2).sub_(1)


#: ``net.activation`` name -> the activation module every distrl MLP builds with it
#: (one entry per :data:`distrl.config.ACTIVATION_NAMES`; numpy_policy.py has each one's numpy twin)
ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": Tanh, "relu": nn.ReLU, "elu": nn.ELU}
