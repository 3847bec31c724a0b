"""Actor-critic networks and the fast action sampling every actor uses.

The MLPs are TorchRL's ``MLP``. Sampling uses the Gumbel-max trick on raw logits instead of a
``torch.distributions.Categorical`` object: on CPU the object alone costs about 70 of the 95 us of
a batch-1 policy call (``python -m timeit`` of the forward and sample: 95 us, 33 us with Gumbel-max), and actors call the policy once per vector step.
"""
from __future__ import annotations

import torch
from torch import nn
from torchrl.modules import MLP

from distrl.config import NetConfig


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
    against 1.67 ms with ``nn.Tanh`` (``python experiments/bench_learner.py``). The same function to float32
    rounding (1e-7 absolute); elsewhere (CUDA) ``torch.tanh`` itself. A subclass, so code that
    asks ``isinstance(m, nn.Tanh)`` still sees a tanh.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            return torch.tanh(x)
        if x.requires_grad and torch.is_grad_enabled():
            return _SigmoidTanh.apply(x)
        return torch.sigmoid(x * 2).mul_(2).sub_(1)


#: ``net.activation`` name -> the activation module every distrl network builds with it
#: (one entry per :data:`distrl.config.ACTIVATION_NAMES`; numpy_policy.py has each one's numpy twin)
ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": Tanh, "relu": nn.ReLU, "elu": nn.ELU}


class ActorCritic(nn.Module):
    """Separate policy and value MLPs over a flat observation.

    ``forward(obs [*B, F]) -> (logits [*B, A], value [*B, 1])``.
    """

    def __init__(self, obs_dim: int, num_actions: int, net: NetConfig = NetConfig()):
        super().__init__()
        act = ACTIVATIONS[net.activation]
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self.policy = MLP(in_features=obs_dim, out_features=num_actions, num_cells=list(net.hidden), activation_class=act)
        self.value = MLP(in_features=obs_dim, out_features=1, num_cells=list(net.hidden), activation_class=act)
        # A small last policy layer starts the policy near uniform, which keeps early V-trace
        # importance ratios close to 1 (as in most PPO/IMPALA implementations).
        with torch.no_grad():
            self.policy[-1].weight.mul_(0.01)
            self.policy[-1].bias.zero_()

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(obs), self.value(obs)

    def tower_parameters(self) -> list[list[nn.Parameter]]:
        """The policy tower's parameters, then the value tower's (clipped apart: :func:`clip_towers`)."""
        return [list(self.policy.parameters()), list(self.value.parameters())]


def clip_towers(towers: list[list[nn.Parameter]], max_norm: float) -> torch.Tensor:
    """Clip each tower's gradient to ``max_norm`` on its own; returns the global norm before clipping.

    Why apart: under one global clip the value gradient sets the norm (CartPole's returns reach
    1/(1-gamma) = 100, so its grad norm runs 20-100 against a clip of 1), and the policy's share of
    every step then shrinks and swells with the value loss: 10x smaller exactly when the policy
    fails and the value loss jumps (docs/impala.md, "Learning that holds").
    """
    # foreach: one kernel over a tower's tensors (CPU's default is a Python loop over them)
    norms = [torch.nn.utils.clip_grad_norm_(group, max_norm, foreach=True) for group in towers]
    return torch.linalg.vector_norm(torch.stack(norms))


class QNetwork(nn.Module):
    """An MLP of action values: ``forward(obs [*B, F]) -> Q [*B, A]`` (Ape-X's actors and learner)."""

    def __init__(self, obs_dim: int, num_actions: int, net: NetConfig = NetConfig()):
        super().__init__()
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self.q = MLP(in_features=obs_dim, out_features=num_actions, num_cells=list(net.hidden),
                     activation_class=ACTIVATIONS[net.activation])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs)


def sample_actions(logits: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample from ``softmax(logits)`` by Gumbel-max.

    Args:
        logits: ``[*B, A]`` unnormalised log-probabilities.
    Returns:
        ``(action [*B] int64, log_prob [*B] float)``.
    """
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(uniform.clamp_(1e-10, 1.0)))
    action = torch.argmax(logits + gumbel, dim=-1)
    log_prob = torch.log_softmax(logits, dim=-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
    return action, log_prob


def greedy_actions(logits: torch.Tensor) -> torch.Tensor:
    """``argmax`` actions ``[*B]`` from logits ``[*B, A]`` (evaluation)."""
    return torch.argmax(logits, dim=-1)


def resolve_device(name: str) -> torch.device:
    """``auto`` means CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
