"""Typed, read-only run configuration.

A config is a tree of frozen dataclasses: ``Config(recipe, run, transport, net, algo)``. Every
field has a one-line doc; invariants are checked when a dataclass is built and raise
``ValueError`` with the reason; one rule holds for every section, the recipes' too: no float
field is NaN or infinite (:func:`check_finite`). Nothing is filled in at run time (remote ranks
hold copies, so a mutation there would silently diverge): derived values are properties.
Variants are made with :func:`override`, which rebuilds (and so re-validates) every dataclass it
touches.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

LOGGERS = ("wandb", "csv", "none")
BACKENDS = ("auto", "local", "rpc")
#: the names ``net.activation`` takes; :data:`distrl.nn.models.ACTIVATIONS` maps each to its module
ACTIVATION_NAMES = ("tanh", "relu", "elu")
#: the names ``net.encoder`` takes; :data:`distrl.nn.encoders.ENCODERS` maps each but auto to its module
ENCODER_NAMES = ("auto", "mlp", "minatar", "nature", "impala")
#: the values ``net.precision`` takes (:func:`distrl.nn.encoders.autocast_dtype` resolves auto)
PRECISIONS = ("float32", "bfloat16", "auto")
#: the values ``run.lr_schedule`` takes (:func:`distrl.roles.learner.lr_factor`)
LR_SCHEDULES = ("constant", "linear")
#: the values ``net.init`` takes (:func:`distrl.nn.models.actor_critic_towers`)
INITS = ("torch", "orthogonal", "flax")


def check(ok: bool, msg: str) -> None:
    """Raise ``ValueError(msg)`` unless ``ok``: how a config dataclass's ``__post_init__`` states
    an invariant, the reason in ``msg``."""
    if not ok:
        raise ValueError(msg)


def check_finite(section: Any, prefix: str) -> None:
    """Raise ``ValueError`` naming the first float field of the dataclass ``section`` (or of one
    nested in it) that is NaN or infinite.

    One rule for every float field of every section, the recipes' ``algo`` included: ``nan``
    fails every comparison, so a ``> 0`` check lets it through (and a NaN interval never comes
    due), and no field takes ``inf`` to mean "never" or "unbounded": a bound that should not bind
    is a large number (``run.max_time_s=1e9``), an optional one is ``none``.
    """
    for f in dataclasses.fields(section):
        value, path = getattr(section, f.name), f"{prefix}.{f.name}"
        if dataclasses.is_dataclass(value):
            check_finite(value, path)
        for v in value if isinstance(value, tuple) else (value,):
            check(not isinstance(v, float) or math.isfinite(v), f"{path} must be a finite number, got {v}")


@dataclass(frozen=True)
class RunConfig:
    """What every recipe shares: the env, the budget, the stop rule, where results go."""

    #: gymnasium id of the environment, or module:function of a TorchRL env factory (docs/torchrl.md)
    env: str = "CartPole-v1"
    seed: int = 0  #: base seed; each rank and env derives its own from it
    total_frames: int = 100_000_000  #: stop after this many env frames (max_time_s usually ends a run first)
    max_time_s: float = 600.0  #: stop after this many seconds of training
    target_return: Optional[float] = None  #: the score to reach: the mean of the last 100 training returns
    early_stop: bool = True  #: stop once target_return is reached (and a greedy eval agrees); false: only measure when
    run_dir: str = ""  #: run directory; empty means runs/<recipe>-<env>-<UTC time>-<random>, new per job
    logger: str = "csv"  #: metrics backend besides metrics.jsonl: wandb (offline), csv or none
    wandb_project: str = "distrl"  #: W&B project of the run (logger wandb)
    wandb_entity: Optional[str] = None  #: W&B entity (user or team); none: your default entity
    wandb_group: Optional[str] = None  #: W&B group; none: the recipe name
    wandb_name: Optional[str] = None  #: W&B run name; none: the run directory's name
    eval_episodes: int = 10  #: episodes of each greedy evaluation (periodic and final)
    eval_interval_s: float = 20.0  #: seconds of training between greedy evaluations; the best is kept; 0: final only
    log_interval_s: float = 2.0  #: seconds between progress lines and metric rows
    checkpoint_interval_s: float = 60.0  #: seconds between periodic checkpoints
    peer_grace_s: float = 30.0  #: seconds the learner waits once every peer is lost, then checkpoints and exits 4
    env_max_failures: int = 10  #: consecutive env failures a worker recovers from (with backoff) before it gives up
    #: an env step (a collector's batch: per step of it) that has not returned after this many seconds
    #: ends its worker, which the learner then declares lost; 0: never
    env_step_timeout_s: float = 60.0
    #: a learner whose loop is silent this long (frozen, deadlocked) is killed: the job ends with status 5; 0: never
    watchdog_s: float = 300.0
    resume: bool = False  #: continue from the latest checkpoint in run_dir
    #: with resume: start over when checkpoint files exist but none loads (else stop with an error)
    allow_fresh: bool = False
    device: str = "auto"  #: learner device: auto (cuda if present), cpu or cuda
    torch_threads: int = 1  #: torch intra-op threads per process (more oversubscribes small CPUs)
    #: the learner's learning rate over the budget: ``constant``, or ``linear`` from the recipe's
    #: ``algo.lr`` to 0 at the end of the budget (frames or time, whichever is further along: the
    #: clock that ``--resume`` restores), as PPO's Atari settings anneal it
    lr_schedule: str = "constant"

    def __post_init__(self):
        check(self.total_frames > 0, f"run.total_frames must be > 0, got {self.total_frames}")
        check(self.max_time_s > 0, f"run.max_time_s must be > 0, got {self.max_time_s}")
        check(self.logger in LOGGERS, f"run.logger must be one of {LOGGERS}, got {self.logger!r}")
        check(self.eval_episodes >= 0, "run.eval_episodes must be >= 0")
        check(self.log_interval_s > 0, "run.log_interval_s must be > 0")
        check(self.eval_interval_s >= 0, "run.eval_interval_s must be >= 0")
        check(
            self.checkpoint_interval_s >= 0,
            f"run.checkpoint_interval_s must be >= 0 (0: after every update), got {self.checkpoint_interval_s}",
        )
        check(self.peer_grace_s >= 0, f"run.peer_grace_s must be >= 0, got {self.peer_grace_s}")
        check(self.watchdog_s >= 0, f"run.watchdog_s must be >= 0, got {self.watchdog_s}")
        check(self.env_max_failures >= 1, f"run.env_max_failures must be >= 1, got {self.env_max_failures}")
        check(self.env_step_timeout_s >= 0, f"run.env_step_timeout_s must be >= 0, got {self.env_step_timeout_s}")
        check(
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
            f"run.device must be auto, cpu or cuda[:N], got {self.device!r}",
        )
        check(self.torch_threads >= 1, "run.torch_threads must be >= 1")
        check(
            self.lr_schedule in LR_SCHEDULES, f"run.lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}"
        )


@dataclass(frozen=True)
class TransportConfig:
    """How roles reach each other."""

    backend: str = "auto"  #: auto (local at world size 1, else rpc), local or rpc
    call_timeout_s: float = 30.0  #: bound on every call; a peer silent this long is lost
    init_timeout_s: float = 120.0  #: bound on joining the group; a missing rank fails after it
    num_threads: int = 16  #: transport worker threads per rank

    def __post_init__(self):
        check(self.backend in BACKENDS, f"transport.backend must be one of {BACKENDS}, got {self.backend!r}")
        check(self.call_timeout_s > 0 and self.init_timeout_s > 0, "transport timeouts must be > 0")
        check(self.num_threads >= 4, "transport.num_threads must be >= 4")


@dataclass(frozen=True)
class NetConfig:
    """The network: an observation encoder (distrl/nn/encoders.py), then policy and value heads; with
    the mlp encoder, separate policy and value MLPs; with an image encoder, one conv torso for both."""

    #: hidden layer widths of each MLP (encoder mlp; image encoders have their paper's)
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"  #: tanh, relu or elu (ACTIVATION_NAMES): the MLPs' activation; image encoders use ReLU
    #: auto (flat: mlp; images up to 16x16: minatar; from 36x36: nature; else impala), or one of ENCODER_NAMES
    encoder: str = "auto"
    #: continuous actions (distrl/nn/heads.py): ``param``, a learned log-std vector; ``state``, a head output
    log_std: str = "param"
    init_log_std: float = 0.0  #: the Gaussian's initial log standard deviation
    #: observation normalisation (distrl/nn/obs_norm.py): ``auto`` is on for flat observations with
    #: continuous actions, off otherwise (images are scaled by their encoder); ``on`` or ``off``
    obs_norm: str = "auto"
    #: value-target normalisation (Sample Factory's ``normalize_returns``; distrl/nn/obs_norm.py): ``on``,
    #: the critic predicts returns standardised by running statistics of the targets, the estimators
    #: see them in reward units; ``off``. The recipes whose loss honours it: ``sf``
    value_norm: str = "off"
    #: an encoder's arithmetic (distrl/nn/encoders.py): ``float32``; ``bfloat16``, its convolutions and
    #: matmuls under autocast (an MLP's hidden layers; heads, losses and the optimizer stay float32);
    #: ``auto``, bfloat16 where the device computes it natively (a CPU with AVX512-BF16 or AMX, a CUDA
    #: GPU with bf16), else float32
    precision: str = "float32"
    #: the actor-critic's initial weights: ``torch`` (PyTorch's defaults, the policy's last layer
    #: x 0.01), ``orthogonal`` (PPO's: gain sqrt(2), 0.01 for the policy's last layer, 1 for the value's)
    #: or ``flax`` (flax's ``Dense``: lecun-normal weights, biases uniform in [0, 0.05), as gymnax-blines)
    init: str = "torch"
    #: a ``LayerNorm`` after each hidden ``Linear`` of the mlp encoder, before its activation (Ba et al.,
    #: 2016): keeps the features' scale fixed while the targets' scale moves (TD learning, Gallici et al., 2024)
    layer_norm: bool = False

    def __post_init__(self):
        check(len(self.hidden) >= 1 and all(h > 0 for h in self.hidden), "net.hidden needs positive widths")
        check(
            self.activation in ACTIVATION_NAMES,
            f"net.activation must be one of {ACTIVATION_NAMES}, got {self.activation!r}",
        )
        check(self.encoder in ENCODER_NAMES, f"net.encoder must be one of {ENCODER_NAMES}, got {self.encoder!r}")
        check(self.log_std in ("param", "state"), f"net.log_std must be param or state, got {self.log_std!r}")
        check(self.obs_norm in ("auto", "on", "off"), f"net.obs_norm must be auto, on or off, got {self.obs_norm!r}")
        check(self.value_norm in ("on", "off"), f"net.value_norm must be on or off, got {self.value_norm!r}")
        check(self.precision in PRECISIONS, f"net.precision must be one of {PRECISIONS}, got {self.precision!r}")
        check(self.init in INITS, f"net.init must be one of {INITS}, got {self.init!r}")


@dataclass(frozen=True)
class AtariConfig:
    """How ``ALE/*`` envs are built (distrl/envs/atari.py): the training envs' options. Evaluation
    always plays the full game (every life, unclipped score) with the same sticky actions."""

    sticky_actions: float = 0.25  #: probability an action repeats the previous one (the -v5 default; 0 for -v4 habits)
    episodic_life: bool = False  #: training episodes end at a life loss (the Nature DQN habit); evaluation never does
    reward_clipping: bool = True  #: training rewards clipped to -1, 0, 1; evaluation scores are never clipped
    noop_max: int = 30  #: up to this many no-op steps at the start of every episode
    threads: int = 1  #: threads of each ale-py vector env (its C++ pool); one per process suits small CPUs
    #: random actions in evaluation (Mnih et al. 2015): a greedy policy that never FIREs stalls Breakout
    eval_epsilon: float = 0.05

    def __post_init__(self):
        check(0 <= self.sticky_actions < 1, f"atari.sticky_actions must be in [0, 1), got {self.sticky_actions}")
        check(0 <= self.eval_epsilon <= 1, f"atari.eval_epsilon must be in [0, 1], got {self.eval_epsilon}")
        check(self.noop_max >= 0 and self.threads >= 1, "atari.noop_max must be >= 0 and atari.threads >= 1")


@dataclass(frozen=True)
class Config:
    """One run: the recipe name, the shared sections and the recipe's own ``algo`` section."""

    recipe: str
    algo: Any  #: the recipe's algorithm dataclass (e.g. ImpalaConfig)
    run: RunConfig = field(default_factory=RunConfig)
    transport: TransportConfig = field(default_factory=TransportConfig)
    net: NetConfig = field(default_factory=NetConfig)
    atari: AtariConfig = field(default_factory=AtariConfig)

    def __post_init__(self):
        for name in ("run", "transport", "net", "atari", "algo"):
            if dataclasses.is_dataclass(getattr(self, name)):
                check_finite(getattr(self, name), name)

    def to_dict(self) -> dict:
        """Plain JSON-able dict (the resolved config written to the run directory)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _coerce(value: Any, hint: Any, path: str) -> Any:
    """Convert a CLI string (or JSON value) to the field's declared type."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        return _coerce(value, next(a for a in args if a is not type(None)), path)
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        return tuple(_coerce(v, args[0], path) for v in items if v != "")
    if hint is bool:
        if isinstance(value, str):
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(f"{path} expects a boolean, got {value!r}")
            return value.lower() in ("1", "true", "yes")
        return bool(value)
    if hint in (int, float, str):
        try:
            converted = hint(value)
        except (TypeError, ValueError):
            raise ValueError(f"{path} expects {hint.__name__}, got {value!r}") from None
        # before the section's own checks, whose "> 0" a NaN slips through (check_finite)
        check(hint is not float or math.isfinite(converted), f"{path} must be a finite number, got {value}")
        return converted
    return value


def override(cfg: Any, **changes: Any) -> Any:
    """A copy of ``cfg`` with dotted-path fields replaced: ``override(c, **{"algo.lr": 1e-3})``.

    Values may be strings (from the command line); they are converted to the field's type and
    the touched dataclasses are rebuilt, so their invariants are checked again.
    """
    for path, value in changes.items():
        cfg = _set(cfg, path.split("."), value, path)
    return cfg


def _set(obj: Any, parts: list[str], value: Any, path: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(obj)}
    if parts[0] not in names:
        raise ValueError(f"unknown config field {path!r} (known here: {', '.join(sorted(names))})")
    current = getattr(obj, parts[0])
    if len(parts) == 1 and dataclasses.is_dataclass(current):
        sub = dataclasses.fields(current)[0].name
        raise ValueError(f"{path!r} is a config section, not a field: set one of its fields, e.g. {path}.{sub}")
    if len(parts) > 1:
        if not dataclasses.is_dataclass(current):
            raise ValueError(f"config field {path!r}: {parts[0]} has no sub-fields")
        return dataclasses.replace(obj, **{parts[0]: _set(current, parts[1:], value, path)})
    hints = typing.get_type_hints(type(obj))
    return dataclasses.replace(obj, **{parts[0]: _coerce(value, hints[parts[0]], path)})


def from_dict(cls: type, data: dict) -> Any:
    """Rebuild a dataclass tree from :meth:`Config.to_dict` output (used when resuming)."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        hint, value = hints[f.name], data[f.name]
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            kwargs[f.name] = from_dict(hint, value)
        else:
            kwargs[f.name] = _coerce(value, hint, f.name) if hint is not Any else value
    return cls(**kwargs)
