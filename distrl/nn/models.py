"""Actor-critic and Q networks over any observation, and the fast action sampling every actor uses.

Each network starts with an encoder (:mod:`distrl.nn.encoders`, chosen by ``net.encoder``):

* ``mlp`` (flat observations): separate policy and value MLPs, each the encoder's layers with a
  linear head appended (``policy.0/2/4``, ``value.0/2/4``: the state dict distrl always wrote);
* an image encoder: one conv torso shared by the policy and value heads, as IMPALA and
  sample-factory share it: the torso is computed once for both in ``forward``.

How a policy's output becomes actions (Gumbel-max over logits, or a Gaussian) is its ``head``:
:mod:`distrl.nn.heads` (``sample_actions`` and ``greedy_actions`` live there and are re-exported here).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

# re-exported: modules import them from here, and pickles of exported policies name distrl.nn.models.Tanh
from distrl.nn.activations import ACTIVATIONS, Tanh  # noqa: F401
from distrl.config import NetConfig
from distrl.nn.action_mask import MaskedOutput
from distrl.nn.encoders import MLPEncoder, as_shape, make_encoder, resolve_encoder
from distrl.nn.heads import GaussianParams, greedy_actions, make_head, sample_actions  # noqa: F401  (re-exported)
from distrl.nn.obs_norm import ObsNorm


class TorsoHead(nn.Module):
    """``head(torso(obs))`` over a torso another module owns: the value head beside a policy
    ``nn.Sequential(torso, head)``.

    The torso is held outside ``_modules``, so the model's state dict lists it once (under
    ``policy.0``): weights travel to actors as the state dict, which would otherwise carry every
    torso tensor twice. So this module's own ``parameters()`` and ``state_dict()`` hold the head
    only; move and load the whole model, not this part alone.
    """

    def __init__(self, torso: nn.Module, head: nn.Module):
        super().__init__()
        object.__setattr__(self, "torso", torso)  # not registered: see above
        self.head = head

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(obs))


def actor_critic_towers(obs_shape: Sequence[int], outputs: int, net: NetConfig) -> tuple[nn.Module, nn.Module]:
    """``(policy, value)``: ``policy(obs [*B, *obs_shape]) -> [*B, outputs]``, ``value(obs) -> [*B, 1]``.

    The mlp encoder gives two separate MLPs; an image encoder one torso, registered inside
    ``policy = nn.Sequential(torso, Linear)`` (so the policy alone is a complete module, as actors
    and exported policies use it) and borrowed by ``value = TorsoHead(torso, Linear)``. The policy's
    last layer starts 100x smaller, which starts the policy near uniform and keeps early V-trace
    importance ratios close to 1 (as in most PPO/IMPALA implementations).
    """
    if resolve_encoder(obs_shape, net.encoder) == "mlp":
        policy, value = MLPEncoder(obs_shape, net, head=outputs), MLPEncoder(obs_shape, net, head=1)
    else:
        torso = make_encoder(obs_shape, net)
        policy = nn.Sequential(torso, nn.Linear(torso.out_features, outputs))
        value = TorsoHead(torso, nn.Linear(torso.out_features, 1))
    with torch.no_grad():
        if net.init == "orthogonal":
            orthogonal_init(policy, value)
        elif net.init == "flax":
            flax_init(policy, value)
        else:
            policy[-1].weight.mul_(0.01)
            policy[-1].bias.zero_()
    return policy, value


def orthogonal_init(policy: nn.Module, value: nn.Module) -> None:
    """``net.init=orthogonal``, PPO's habit (Engstrom et al. 2020; CleanRL's ``layer_init``, Sample
    Factory's default): every hidden ``Linear`` and ``Conv2d`` orthogonal with gain sqrt(2), the
    policy's last layer with gain 0.01 (a near-uniform policy at the start), the value's with 1,
    biases 0. Why it matters on images: PyTorch's default keeps a quarter of each ReLU layer's
    scale, so the Nature network's 512 features of a Pong frame come out ~0.01 (~0.2 with this):
    the policy's logits then move 25x slower per step, and ``sf`` on Pong kept the policy uniform
    (entropy 1.78 of ln 6 = 1.79) for 1.4M agent steps (docs/atari.md)."""
    layers = lambda m: [x for x in m.modules() if isinstance(x, (nn.Linear, nn.Conv2d))]  # noqa: E731
    torso = shared_torso(value)
    value_layers = layers(value.head) if torso is not None else layers(value)
    for layer in layers(policy) + value_layers:
        nn.init.orthogonal_(layer.weight, 2**0.5)
        nn.init.zeros_(layer.bias)
    nn.init.orthogonal_(layers(policy)[-1].weight, 0.01)
    nn.init.orthogonal_(value_layers[-1].weight, 1.0)


def flax_init(policy: nn.Module, value: nn.Module) -> None:
    """``net.init=flax``, what a flax model gets from ``nn.Dense(bias_init=uniform(0.05))``, as
    gymnax-blines' ``CategoricalSeparateMLP`` builds it (utils/models.py, commit 3f029d6): every
    ``Linear`` and ``Conv2d`` weight lecun-normal (flax's ``variance_scaling(1, "fan_in",
    "truncated_normal")``: a normal truncated at +-2 standard deviations, rescaled so its variance
    is 1 / fan_in), every bias uniform in [0, 0.05), the last layers unscaled (the policy starts
    less uniform than under ``torch`` or ``orthogonal``). For the runs beside gymnax's table."""
    for layer in [x for x in list(policy.modules()) + list(value.modules()) if isinstance(x, (nn.Linear, nn.Conv2d))]:
        fan_in = layer.weight[0].numel()
        std = (1.0 / fan_in) ** 0.5 / TRUNCATED_NORMAL_STD
        nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
        nn.init.uniform_(layer.bias, 0.0, 0.05)


#: the standard deviation of a unit normal truncated at +-2 (flax's and TensorFlow's constant)
TRUNCATED_NORMAL_STD = 0.87962566103423978


def shared_torso(value: nn.Module) -> nn.Module | None:
    """The torso a value tower borrows from its policy (:class:`TorsoHead`), or None for an MLP."""
    return value.torso if isinstance(value, TorsoHead) else None


def tower_groups(policy: nn.Module, value: nn.Module) -> list[list[nn.Parameter]]:
    """What :func:`clip_towers` clips apart: ``[policy, value]`` for separate MLPs, ``[torso,
    policy head, value head]`` over a shared torso. The torso's gradient is the sum of both losses'
    whatever is done; clipped on its own it gets the global clip IMPALA and sample-factory give the
    whole network, while each head still takes its step whatever the other's gradient norm."""
    torso = shared_torso(value)
    if torso is None:
        return [list(policy.parameters()), list(value.parameters())]
    return [list(torso.parameters()), list(policy[1:].parameters()), list(value.head.parameters())]


def wants_obs_norm(obs_shape: Sequence[int], continuous: bool, net: NetConfig) -> bool:
    """Whether a network over ``obs_shape`` starts with an :class:`ObsNorm`: ``net.obs_norm`` on,
    or ``auto`` with flat observations and continuous actions (MuJoCo's habit: joint angles and
    velocities differ in scale by 100x). Images only when ``on`` (per-pixel statistics, Sample
    Factory's ``normalize_input``: a rarely lit pixel, Pong's ball, stands out where its variance is
    small; under ``auto`` their encoder scales them by 1/255)."""
    if len(as_shape(obs_shape)) != 1:
        return net.obs_norm == "on"
    return net.obs_norm == "on" or (net.obs_norm == "auto" and continuous)


#: where an :class:`ActorCritic`'s observation statistics sit in its state dict: in front of both
#: towers of a flat network (``obs_norm``), inside the shared torso of an image one (``policy.0.norm``)
OBS_NORM_PREFIXES = ("obs_norm.", "policy.0.norm.")


class ActorCritic(nn.Module):
    """A policy and a value over one observation encoder (:func:`actor_critic_towers`), for
    discrete or continuous actions: ``head`` (:mod:`distrl.nn.heads`) says what the policy's output is.

    ``forward(obs [*B, *obs_shape]) -> (out [*B, head.width], value [*B, 1])``, ``out`` the logits
    ``[*B, A]`` (``num_actions`` set) or a Gaussian's ``cat(mean, log_std) [*B, 2A]``
    (``num_actions=None``, ``action_dim=A``); ``policy(obs)`` and ``value(obs)`` are the two towers
    as modules. With observation normalisation (:func:`wants_obs_norm`) both towers start with one
    shared :class:`distrl.nn.obs_norm.ObsNorm` (``obs_norm``; None without). ``obs_shape`` may be an
    int ``F`` (``(F,)``). With ``action_mask`` (an env whose observation ends with its mask,
    :mod:`distrl.nn.action_mask`) the policy tower sets illegal actions' logits to the lowest float.
    """

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        num_actions: int | None,
        net: NetConfig = NetConfig(),
        action_dim: int = 1,
        action_mask: bool = False,
    ):
        super().__init__()
        self.obs_shape, self.num_actions = as_shape(obs_shape), num_actions
        self.head = make_head(num_actions, action_dim)
        gaussian = self.head.continuous
        state_std = gaussian and net.log_std == "state"
        outputs = self.head.width if not gaussian or state_std else action_dim
        policy, value = actor_critic_towers(self.obs_shape, outputs, net)
        if gaussian:
            policy = (
                nn.Sequential(*policy, GaussianParams(action_dim, state_std, net.init_log_std))
                if shared_torso(value) is not None
                else nn.Sequential(policy, GaussianParams(action_dim, state_std, net.init_log_std))
            )
        wanted, torso = wants_obs_norm(self.obs_shape, gaussian, net), shared_torso(value)
        if wanted and torso is not None:  # an image torso: normalise inside it, so one pass still serves both heads
            torso.norm = ObsNorm(self.obs_shape)
            object.__setattr__(self, "obs_norm", torso.norm)  # registered once, in the torso (its state_dict name)
        else:
            self.obs_norm = ObsNorm(self.obs_shape[0]) if wanted else None
        if self.obs_norm is not None and torso is None:
            policy, value = nn.Sequential(self.obs_norm, policy), nn.Sequential(self.obs_norm, value)
        if action_mask:
            if num_actions is None or torso is not None:
                raise ValueError("action masks need discrete actions and a flat observation (the mlp encoder)")
            policy = MaskedOutput(policy, num_actions)
        self.policy, self.value = policy, value
        #: ``net.value_norm=on``: statistics of the value targets ``[1]``; ``value`` predicts them standardised
        #: (clamped at 5 sd, Sample Factory's clip), the loss denormalises them for the estimators
        self.value_norm = ObsNorm(1, clip=5.0) if net.value_norm == "on" else None
        self._register_load_state_dict_pre_hook(_vecenv_gaussian_layout, with_module=True)

    @classmethod
    def for_env(cls, info, net: NetConfig = NetConfig()) -> "ActorCritic":
        """The network for an env's :class:`distrl.envs.info.EnvInfo` (its shape and action space)."""
        return cls(info.shape, info.num_actions, net, info.action_dim, getattr(info, "action_mask", False))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        torso = shared_torso(self.value)
        if torso is None:
            return self.policy(obs), self.value(obs)
        z = torso(obs)  # once for both heads
        return self.policy[1:](z), self.value.head(z)

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action, log_prob [*B])`` sampled from the policy (actions as :attr:`head` describes)."""
        return self.head.sample(self.policy(obs), generator)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_prob [*B], entropy [*B], value [*B])`` of ``action`` in one pass."""
        out, value = self(obs)
        log_prob, entropy = self.head.log_prob_entropy(out, action)
        return log_prob, entropy, value.squeeze(-1)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The evaluation action: argmax, or the Gaussian's mean."""
        return self.head.greedy(self.policy(obs))

    def tower_parameters(self) -> list[list[nn.Parameter]]:
        """The groups :func:`clip_towers` clips apart (:func:`tower_groups`): the policy tower's
        parameters, then the value tower's; over a conv torso: the torso's, the policy head's, the value head's."""
        return tower_groups(self.policy, self.value)


def _vecenv_gaussian_layout(model: ActorCritic, state: dict, prefix: str, *_) -> None:
    """Renames a checkpoint of ``vecenv``'s own Gaussian actor-critic (distrl 0.2.0 until it built this
    class) to this layout, in place: it kept the log-std vector at the top (``log_std``) and the mean
    tower as the policy, where this class ends the policy tower with :class:`GaussianParams`
    (``policy.1.log_std``, the mean MLP as ``policy.0``; behind an ObsNorm ``policy.1.1`` and
    ``policy.1.0``; an image policy's layers keep their names). So its runs load and resume."""
    params = next((name for name, m in model.named_modules() if isinstance(m, GaussianParams)), None)
    if prefix + "log_std" not in state or params is None:
        return
    log_std = state.pop(prefix + "log_std")
    parent = params.rpartition(".")[0]  # the Sequential(mean tower, GaussianParams) holding it
    if len(model.get_submodule(parent)) == 2:  # the mean tower was this Sequential's place: one level down now
        old = f"{prefix}{parent}."
        for key in [k for k in state if k.startswith(old)]:
            state[f"{old}0.{key[len(old) :]}"] = state.pop(key)
    state[f"{prefix}{params}.log_std"] = log_std


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


class DuelingHead(nn.Module):
    """``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')`` from features ``[*B, D]`` (Wang et al., 2016).

    Ape-X's network. The value of every action moves through ``V`` when the scale of returns
    moves (CartPole's Q climbs from ~50 to ~100 once the policy first survives to the time limit),
    and the greedy action reads only ``A``, which that shift leaves alone."""

    def __init__(self, features: int, num_actions: int):
        super().__init__()
        self.value = nn.Linear(features, 1)
        self.advantage = nn.Linear(features, num_actions)  # registered last: its rows are the actions

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        a = self.advantage(z)
        return self.value(z) + a - a.mean(-1, keepdim=True)


class QNetwork(nn.Module):
    """Action values over one encoder: ``forward(obs [*B, *obs_shape]) -> Q [*B, A]`` (Ape-X's actors
    and learner). ``q`` is the mlp encoder with a linear head appended (``q.0/2/4``, as ever), or
    ``nn.Sequential(image encoder, Linear)`` as in the papers' DQNs; with ``dueling``,
    ``nn.Sequential(encoder, DuelingHead)``. With ``action_mask`` that ``q`` is wrapped in a
    :class:`~distrl.nn.action_mask.MaskedOutput`: illegal actions' values are the lowest float."""

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        num_actions: int,
        net: NetConfig = NetConfig(),
        dueling: bool = False,
        action_mask: bool = False,
    ):
        super().__init__()
        self.obs_shape, self.num_actions = as_shape(obs_shape), num_actions
        mlp = resolve_encoder(self.obs_shape, net.encoder) == "mlp"
        if mlp and not dueling:
            self.q = MLPEncoder(self.obs_shape, net, head=num_actions)
        else:
            torso = MLPEncoder(self.obs_shape, net) if mlp else make_encoder(self.obs_shape, net)
            head = DuelingHead if dueling else nn.Linear
            self.q = nn.Sequential(torso, head(torso.out_features, num_actions))
        if action_mask:
            self.q = MaskedOutput(self.q, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs)


def resolve_device(name: str) -> torch.device:
    """``auto`` means CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
