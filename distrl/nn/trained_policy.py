"""A trained policy taken back into TorchRL: :func:`load_policy` (:mod:`distrl.nn.export` writes it to a file).

A run directory holds ``config.json`` and the learner's checkpoints (``checkpoints/ckpt_*.pt``,
the newest being the final policy, and ``best.pt``, the best-evaluated one). :func:`load_policy`
rebuilds the recipe's network from them and wraps it in TorchRL modules, so it runs wherever a
TorchRL policy does (``env.rollout(policy=...)``, a ``Collector``):

Which network a checkpoint holds is its recipe's ``Recipe.policy_network``, saved in the checkpoint
(:func:`policy_network`), so a new recipe needs no entry here:

* ``actor_critic`` (impala, seed with the MLP core, sf, a3c, vecenv): a
  ``ProbabilisticActor`` over the policy network; observation normalisation (``net.obs_norm``,
  present when the checkpoint holds its statistics) is inside it, as the learner evaluated it.
  Discrete actions are a ``Categorical`` (indices) or a ``OneHotCategorical``; continuous ones an
  ``IndependentNormal`` over the Gaussian head's mean and clamped log-std
  (:class:`distrl.nn.heads.LocScale`), projected into a ``Bounded`` spec as distrl's own env
  adapter clips them.
* ``q_network`` (apex): TorchRL's ``QValueActor`` over the Q-network (greedy; no sampling).
* ``sac`` (apex on a ``Box``): a ``ProbabilisticActor`` with TorchRL's ``TanhNormal`` over the policy's
  mean and std, scaled to the action box (:mod:`distrl.nn.sac`): its deterministic action is
  ``bias + scale tanh(mean)``, what distrl evaluates.

The network is rebuilt from the run's ``net`` config (a config without ``net.encoder``, from before
encoders, means ``auto``) and an observation shape read from the checkpoint itself, so a run on a
user's env factory loads without building that env: an image encoder keeps its ``obs_shape`` as a
buffer in the state dict (:mod:`distrl.nn.encoders`); a flat observation's size is the first layer's
input features, as every older checkpoint has it. Image policies read the observation as the env
gives it (uint8, bool or float ``[*B, C, H, W]``) and scale it inside the network.

Discrete actions are written as the training env took them: the learner records its TorchRL env's
encoding (``OneHot`` or ``Categorical``) in every checkpoint (``action_encoding``). A run on a
gymnasium id, or a checkpoint from before distrl recorded it, gives one-hot actions, GymEnv's
default. An ``action_spec`` given to :func:`load_policy` overrides both.

A masked run (docs/action-masks.md) also reads ``action_mask``; neither its mode nor a sample is ever illegal.

Greedy is the mode of the distribution (``InteractionType.DETERMINISTIC``), what every distrl
evaluation plays. As with any TorchRL actor, a ``set_exploration_type`` context overrides it, and a
``Collector`` samples unless given ``exploration_type=ExplorationType.DETERMINISTIC``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import NoReturn, Optional

import torch
from tensordict.nn import InteractionType, TensorDictModule
from torch import nn
from torchrl.data import Bounded, Categorical, Composite, OneHot, TensorSpec, Unbounded
from torchrl.modules import IndependentNormal, OneHotCategorical, ProbabilisticActor, QValueActor, TanhNormal

from distrl.runtime.checkpoint import best_checkpoint_path, list_checkpoints, load_checkpoint, load_latest_checkpoint
from distrl.data import keys
from distrl.envs import mock, partial  # noqa: F401  (distrl's own env ids resolve in a TorchRL GymEnv too)
from distrl.nn.action_mask import MaskBeside, is_masked
from distrl.nn.heads import LocScale
from distrl.nn.sac import LocScale as SACLocScale, sac_from_state

CHECKPOINTS = ("best", "last")
ACTION_ENCODINGS = ("one_hot", "categorical")  #: a checkpoint's ``action_encoding``, when it has one


def _fail(msg: str) -> NoReturn:
    raise ValueError(msg)


def load_run(run_dir: str | Path, checkpoint: str = "best") -> tuple[dict, dict]:
    """``(config dict, checkpoint dict)`` of a run; ``checkpoint`` is ``best`` (``best.pt``, or the
    newest when the run kept none), ``last`` (the newest: the policy ``summary.json``'s
    ``eval_return_mean`` scored) or the path of a checkpoint file. ``ValueError`` in one line when
    the directory is not a run or holds no checkpoint."""
    run = Path(run_dir)
    config = run / "config.json"
    if not config.is_file():
        _fail(f"{run_dir} is not a distrl run directory (no config.json): give the --run-dir of a training run")
    cfg = json.loads(config.read_text())
    if checkpoint not in CHECKPOINTS:
        path = Path(checkpoint)
        if not path.is_file():
            _fail(f"checkpoint must be one of {CHECKPOINTS} or a checkpoint file, got {checkpoint!r}")
        try:
            return cfg, load_checkpoint(path)
        except Exception as e:  # damaged, or naming code to run: weights-only refuses, in one line
            _fail(f"{path} does not load as a distrl checkpoint (weights only): {type(e).__name__}")
    state = None
    if checkpoint == "best" and best_checkpoint_path(run).is_file():
        state = load_checkpoint(best_checkpoint_path(run))
    if state is None:
        state = load_latest_checkpoint(run)
    if state is None:
        where = "damaged" if list_checkpoints(run) else "none written yet"
        _fail(
            f"{run_dir} holds no loadable checkpoint ({where}): train longer than run.checkpoint_interval_s "
            "or let the run finish"
        )
    return cfg, state


def _dims(state: dict, prefix: str) -> tuple[tuple[int, ...], int]:
    """``(obs_shape, outputs)`` of the network whose parameters start with ``prefix``: an image
    encoder's ``obs_shape`` buffer, else ``(F,)`` with ``F`` the first 2-D weight's input features;
    the outputs are the last 2-D weight's (the layers are registered in order, the head last)."""
    weights = [v for k, v in state.items() if k.startswith(prefix) and v.dim() == 2]
    if not weights:
        _fail(f"the checkpoint holds no {prefix!r} network: not a model this version of distrl knows")
    shapes = [v for k, v in state.items() if k.startswith(prefix) and k.endswith(".obs_shape")]
    obs_shape = tuple(int(d) for d in shapes[0].tolist()) if shapes else (weights[0].shape[1],)
    return obs_shape, weights[-1].shape[0]


def resolve_action_spec(
    action_spec: Optional[TensorSpec], num_actions: Optional[int], action_dim: int, env_id: str, encoding: Optional[str]
) -> TensorSpec:
    """The action spec the actor writes to: the user's, else for discrete actions the training env's
    ``encoding`` (``Categorical`` indices, or ``OneHot`` ``[A]``: GymEnv's default and the answer when
    none was recorded), else the gymnasium id's Box bounds (unbounded for an id gymnasium lacks)."""
    if isinstance(action_spec, Composite):
        action_spec = action_spec[keys.ACTION]
    if action_spec is not None:
        return action_spec
    if num_actions is not None:
        return Categorical(num_actions) if encoding == "categorical" else OneHot(num_actions)
    try:
        import gymnasium as gym

        space = gym.make(env_id).action_space  # gym.make imports a module:EnvId's module first
        return Bounded(
            torch.as_tensor(space.low, dtype=torch.float32).reshape(-1),
            torch.as_tensor(space.high, dtype=torch.float32).reshape(-1),
            shape=(action_dim,),
        )
    except Exception:  # an id known only to the user's env factory
        return Unbounded(shape=(action_dim,))


def policy_network(ckpt: dict) -> str:
    """``"q_network"`` or ``"actor_critic"``: what the checkpoint's recipe trains (``Recipe.policy_network``,
    saved in every checkpoint); for a checkpoint written before it was saved, what its weights are."""
    return ckpt.get("policy_network") or (
        "q_network" if any(k.startswith("q.") for k in ckpt["model"]) else "actor_critic"
    )


def build_model(cfg: dict, state: dict, network: str) -> tuple[nn.Module, Optional[int], int]:
    """The recipe's network with the checkpoint's weights: ``(model, num_actions or None, action_dim)``."""
    from distrl.config import NetConfig, from_dict
    from distrl.nn.models import OBS_NORM_PREFIXES, ActorCritic, QNetwork

    algo = cfg.get("algo", {})
    net = from_dict(NetConfig, cfg["net"])  # fields it lacks (encoder, before encoders) keep their defaults
    if algo.get("core", "mlp") != "mlp" or any(".core." in k for k in state):
        _fail(
            f"load_policy supports the mlp core only, not algo.core={algo.get('core')!r} "
            "(its recurrent state needs an env-side primer TorchRL users add themselves)"
        )
    if network == "sac":
        model = sac_from_state(state, net)
        return model.eval(), None, model.action_dim
    if network == "q_network":
        obs_shape, num_actions = _dims(state, "q.")
        model = QNetwork(obs_shape, num_actions, net, bool(algo.get("dueling", False)), is_masked(state, "q."))
        action_dim = 1
    elif network == "actor_critic":
        obs_shape, out = _dims(state, "policy.")
        if _gaussian(state, net, cfg["run"]["env"]):  # a Gaussian head: out is A (log-std vector) or 2A
            num_actions, action_dim = None, out if net.log_std == "param" else out // 2
        else:
            num_actions, action_dim = out, 1
        # normalised as the checkpoint says: its statistics are there or not (older vecenv runs
        # switched it with algo.normalize_obs, which net.obs_norm alone does now)
        obs_norm = "on" if any(k.startswith(OBS_NORM_PREFIXES) for k in state) else "off"
        net = dataclasses.replace(net, obs_norm=obs_norm)
        model = ActorCritic(obs_shape, num_actions, net, action_dim, is_masked(state, "policy."))
    else:
        _fail(f"load_policy does not know the network {network!r} of recipe {cfg['recipe']!r}")
    model.load_state_dict(state)
    return model.eval(), num_actions, action_dim  # parameters stay trainable: a TorchRL loss may fine-tune them


def _gaussian(state: dict, net, env_id: str) -> bool:
    """Whether an actor-critic checkpoint's policy is a Gaussian (distrl/nn/heads.py): its learned
    log-std vector is in the state dict, or (``net.log_std=state``: a head output, no parameter of its
    own) the training env's actions are a box."""
    if any(k == "log_std" or k.endswith(".log_std") for k in state):  # bare: vecenv's before ActorCritic
        return True
    if net.log_std != "state":
        return False
    try:
        import gymnasium as gym

        return isinstance(gym.make(env_id).action_space, gym.spaces.Box)  # a module:EnvId's module imported first
    except Exception:  # a TorchRL env factory (module:function), or an env this process cannot make
        pass
    try:
        from distrl.envs.torchrl_env import check_factory

        return check_factory(env_id).num_actions is None
    except Exception:
        return False


def load_policy(
    run_dir: str | Path,
    *,
    checkpoint: str = "best",
    sample: bool = False,
    action_spec: Optional[TensorSpec] = None,
    device: str | torch.device = "cpu",
) -> TensorDictModule:
    """The policy a distrl run trained, as a TorchRL actor (see the module docstring).

    Reads ``observation`` ``[*B, *obs_shape]`` (``algo.obs_key`` for a ``vecenv`` run on a factory env;
    an action-masked run: ``action_mask [*B, A]`` too) and writes ``action`` (``[*B]`` indices or
    ``[*B, A]`` one-hot, as the training env took them or ``action_spec`` says; ``[*B, A]`` floats), plus
    ``logits`` / ``loc``, ``scale`` and ``action_log_prob`` (actor-critics) or ``action_value`` ``[*B, A]``
    (apex).

    Args:
        run_dir: a run directory (``--run-dir`` of ``distrl train``).
        checkpoint: ``best`` (default), ``last`` or a checkpoint file (:func:`load_run`).
        sample: sample actions by default instead of playing the mode (actor-critics only).
        action_spec: the env's action spec (``env.action_spec``); chooses one-hot or index actions
            (default: the training env's encoding) and the bounds continuous actions are projected into.
        device: where the actor's parameters live.
    """
    cfg, state = load_run(run_dir, checkpoint)
    if "model" not in state:
        _fail(f"{checkpoint} checkpoint of {run_dir} holds no model")
    network = policy_network(state)
    model, num_actions, action_dim = build_model(cfg, state["model"], network)
    model.to(device)
    encoding = state.get("action_encoding")  # absent from checkpoints written before it was recorded
    if encoding is not None and encoding not in ACTION_ENCODINGS:
        _fail(f"{checkpoint} checkpoint of {run_dir} has action_encoding {encoding!r}, not one of {ACTION_ENCODINGS}")
    spec = resolve_action_spec(action_spec, num_actions, action_dim, cfg["run"]["env"], encoding).to(device)
    obs_key = cfg.get("algo", {}).get("obs_key", keys.OBSERVATION)  # vecenv's on a factory env
    masked = is_masked(state["model"], "q." if network == "q_network" else "policy.")  # reads action_mask too
    if network == "q_network":
        if sample:
            _fail("apex's policy is a Q-network, greedy only: wrap it in torchrl.modules.EGreedyModule to explore")
        q = TensorDictModule(MaskBeside(model), [obs_key, keys.ACTION_MASK], ["action_value"]) if masked else model
        return QValueActor(q, in_keys=None if masked else [obs_key], spec=spec)
    interaction = InteractionType.RANDOM if sample else InteractionType.DETERMINISTIC
    if network == "sac":
        box = {"low": model.action_bias - model.action_scale, "high": model.action_bias + model.action_scale}
        module = TensorDictModule(SACLocScale(model), in_keys=[obs_key], out_keys=[keys.LOC, keys.SCALE])
        return ProbabilisticActor(
            module,
            [keys.LOC, keys.SCALE],
            spec=spec,
            distribution_class=TanhNormal,
            distribution_kwargs=box,
            default_interaction_type=interaction,
            return_log_prob=True,
        )
    if num_actions is not None:
        dist = OneHotCategorical if isinstance(spec, OneHot) else torch.distributions.Categorical
        if not isinstance(spec, (OneHot, Categorical)):
            _fail(f"the run's policy has {num_actions} discrete actions but the action spec is {type(spec).__name__}")
        in_keys = [obs_key, keys.ACTION_MASK] if masked else [obs_key]
        module = TensorDictModule(MaskBeside(model.policy) if masked else model.policy, in_keys, [keys.LOGITS])
        return ProbabilisticActor(
            module,
            in_keys=[keys.LOGITS],
            spec=spec,
            distribution_class=dist,
            default_interaction_type=interaction,
            return_log_prob=True,
        )
    # the policy writes cat(mean, log_std) (distrl/nn/heads.py), read as TorchRL's (loc, scale)
    module = TensorDictModule(
        nn.Sequential(model.policy, LocScale(action_dim)), in_keys=[obs_key], out_keys=[keys.LOC, keys.SCALE]
    )
    return ProbabilisticActor(
        module,
        in_keys=[keys.LOC, keys.SCALE],
        spec=spec,
        distribution_class=IndependentNormal,
        default_interaction_type=interaction,
        return_log_prob=True,
        safe=isinstance(spec, Bounded),
    )
