"""The actor's policy MLP and its Gumbel-max sampling in numpy, for the small batches actors step.

An impala actor calls its policy once per vector step on ``B`` (32) observations. At that size
the arithmetic is nothing and torch's per-call dispatch is everything: on these CPUs a torch op
costs 6-8 us however small, so the 2x64 MLP's forward took 85-90 us and the sampling (ten ops)
80 us, against 600 us for the 32 CartPole steps themselves. The same forward and sampling in
numpy take about 20 us (``python -m experiments.bench_costs`` shows the actor's cost per frame
before and after). Nothing about what is learned changes: the same float32 weights (views of
the torch parameters, not copies), the same distribution, and the log-probability of the
sampled action computed as :func:`distrl.nn.models.sample_actions` computes it.

A policy MLP (:class:`distrl.nn.encoders.MLPEncoder` with its head, or TorchRL's ``MLP``) is an
``nn.Sequential`` of ``Linear`` layers and activation modules; any other module makes
:meth:`NumpyPolicy.supports` false and the actor keeps its torch policy. Image encoders are such
modules: a policy over a conv torso always runs in torch (numpy has no fast convolution, and at
those sizes the convolutions, not torch's dispatch, are the cost). A masked policy
(:class:`distrl.nn.action_mask.MaskedOutput` around such an MLP) runs here too, its mask applied as
the torch module applies it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distrl.nn.action_mask import MaskedOutput, masked_value
from distrl.nn.activations import ACTIVATIONS
from distrl.nn.encoders import ImageEncoder

#: the numpy twin of each activation of :data:`distrl.nn.models.ACTIVATIONS`, by name
_NUMPY = {
    "tanh": np.tanh,
    "relu": lambda h: np.maximum(h, 0.0),
    "elu": lambda h: np.where(h > 0, h, np.expm1(np.minimum(h, 0.0))),
}
# by module type (a KeyError here: an activation was added without its numpy twin); torch's own
# nn.Tanh too, the base class of distrl's Tanh
_ACTIVATIONS = {nn.Tanh: np.tanh, **{module: _NUMPY[name] for name, module in ACTIVATIONS.items()}}


def _refusal(mlp: nn.Module) -> str:
    """Why :class:`NumpyPolicy` cannot run ``mlp``, in one line naming the layers it does not know."""
    layers = list(mlp) if isinstance(mlp, nn.Sequential) else [mlp]
    odd = sorted({type(m).__name__ for m in layers if not isinstance(m, nn.Linear) and type(m) not in _ACTIVATIONS})
    image = any(isinstance(m, ImageEncoder) for m in layers)
    names = ", ".join(dict.fromkeys(a.__name__ for a in _ACTIVATIONS))
    return (
        f"NumpyPolicy runs Linear layers and {names} in an nn.Sequential; got {', '.join(odd) or type(mlp).__name__}"
        + (" (an image encoder: a policy over one stays in torch)" if image else "")
    )


class NumpyPolicy:
    """``act(obs [B, F]) -> (action [B] int64, log_prob [B] float32)`` over an MLP's own weights.

    The weights are numpy views of the module's parameters, so a ``load_state_dict`` (an
    in-place copy) is seen at once; call :meth:`refresh` after anything that replaces a
    parameter's storage (``param.data = ...``)."""

    def __init__(self, mlp: nn.Sequential, seed: int):
        if not self.supports(mlp):
            raise ValueError(_refusal(mlp.tower if isinstance(mlp, MaskedOutput) else mlp))
        #: ``A`` when the last ``A`` observation entries are an action mask (a MaskedOutput), else 0
        self.masked = mlp.num_actions if isinstance(mlp, MaskedOutput) else 0
        self.mlp = mlp.tower if self.masked else mlp
        self.rng = np.random.default_rng(seed)
        self.refresh()

    @staticmethod
    def supports(mlp: nn.Module) -> bool:
        if isinstance(mlp, MaskedOutput):
            mlp = mlp.tower
        return (
            isinstance(mlp, nn.Sequential)
            and len(mlp) > 0
            and isinstance(mlp[-1], nn.Linear)
            and all(isinstance(m, nn.Linear) or type(m) in _ACTIVATIONS for m in mlp)
        )

    def refresh(self) -> None:
        """Re-take the views of the parameters (each layer: ``W.T [in, out]``, ``b [out]``, or an activation)."""
        self.layers = []
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                bias = m.bias.detach().numpy() if m.bias is not None else np.float32(0.0)
                self.layers.append((m.weight.detach().numpy().T, bias))
            else:
                self.layers.append(_ACTIVATIONS[type(m)])

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """``obs [B, F]`` float32 -> ``logits [B, A]`` float32."""
        h = obs
        for layer in self.layers:
            if isinstance(layer, tuple):
                h = h @ layer[0]
                h += layer[1]
            else:
                h = layer(h)
        return h

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample from ``softmax(logits(obs))`` by Gumbel-max (:func:`distrl.nn.models.sample_actions`)."""
        x = obs.numpy()
        logits = self.logits(x)
        if self.masked:  # distrl.nn.action_mask.MaskedOutput's rule, a row with no legal action all legal
            legal = x[:, -self.masked :] > 0.5
            legal |= ~legal.any(-1, keepdims=True)
            logits = np.where(legal, logits, np.float32(masked_value(torch.float32)))
        B = logits.shape[0]
        # u in [0, 1): floor it at 1e-10 as sample_actions does (np.maximum: np.clip costs 6x more here)
        u = np.maximum(self.rng.random(logits.shape, dtype=np.float32), np.float32(1e-10))
        action = np.argmax(logits - np.log(-np.log(u)), axis=-1)
        z = logits - logits.max(axis=-1)[:, None]  # log_softmax, stable
        log_prob = z[np.arange(B), action] - np.log(np.exp(z).sum(axis=-1))
        return torch.from_numpy(action.astype(np.int64)), torch.from_numpy(log_prob.astype(np.float32))
