"""``distrl export-policy``: a trained policy written to one file, in two forms.

* ``--format torchrl`` (default, :func:`export_policy`): :func:`~distrl.nn.trained_policy.load_policy`'s
  TorchRL actor pickled whole; ``torch.load(OUT, weights_only=False)`` gives it back where torch,
  tensordict, torchrl and distrl are installed.
* ``--format pt2`` (:func:`export_program`): the greedy policy as a ``torch.export`` program, for a
  deployment that has torch alone::

      policy = torch.export.load("policy.pt2").module()
      action = policy(obs)   # obs [B, *obs_shape] as the env gives it -> action [B] or [B, A]

  The program is :class:`GreedyPolicy`: the network with everything between the env's observation
  and the action inside it (uint8 images scaled by 1/255 or bool grids made float in the first layer,
  ``net.obs_norm``'s statistics, an action mask read from the observation's last entries), then the
  evaluation action: argmax over discrete actions (``int64 [B]``), a Gaussian's mean clamped to the
  action box, or SAC's ``bias + scale tanh(mean)`` (``float32 [B, A]``). Images are channels-first
  (``[B, C, H, W]``) as distrl's envs give them: transpose gymnasium's ``[H, W, C]`` before the call.
  ``torch.export.load(OUT, extra_files={"distrl.json": ""})`` fills in what the program takes and
  gives (:func:`program_info`). TorchScript, the older form, is deprecated from torch 2.13.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import torch
from torch import nn
from torchrl.data import Bounded, Categorical, OneHot

from distrl.envs import atari
from distrl.envs.gym import env_info
from distrl.nn.trained_policy import build_model, load_policy, load_run, policy_network, resolve_action_spec

FORMATS = ("torchrl", "pt2")
#: the largest batch the program is exported for (the batch dimension is dynamic below it)
MAX_BATCH = 1 << 16


class GreedyPolicy(nn.Module):
    """``obs [B, *obs_shape] -> action``: ``int64 [B]`` indices (argmax of logits or Q-values) or
    ``float32 [B, A]`` (a Gaussian's mean clamped to ``[low, high]``, or SAC's squashed mean): the
    action every distrl evaluation plays."""

    def __init__(self, model: nn.Module, network: str, low: Optional[torch.Tensor], high: Optional[torch.Tensor]):
        super().__init__()
        self.model, self.network = model, network
        self.bounded = low is not None
        self.register_buffer("low", low if low is not None else torch.zeros(0))
        self.register_buffer("high", high if high is not None else torch.zeros(0))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.network == "q_network":
            return self.model(obs).argmax(-1)
        action = self.model.greedy(obs)
        return torch.clamp(action, self.low, self.high) if self.bounded else action


def program_info(run_dir: str | Path, checkpoint: str = "best") -> tuple[GreedyPolicy, dict]:
    """``(GreedyPolicy, description)`` of a run's policy; the description is what ``distrl.json`` holds:
    env, recipe, checkpoint, observation shape and dtype, action kind, count or box."""
    cfg, state = load_run(run_dir, checkpoint)
    if "model" not in state:
        raise ValueError(f"{checkpoint} checkpoint of {run_dir} holds no model")
    network = policy_network(state)
    model, num_actions, action_dim = build_model(cfg, state["model"], network)
    model.requires_grad_(False)
    env_id = cfg["run"]["env"]
    low = high = None
    if num_actions is None and network != "sac":  # SAC's action is inside its box by construction
        spec = resolve_action_spec(None, None, action_dim, env_id, None)
        if isinstance(spec, Bounded):
            low, high = spec.space.low.float(), spec.space.high.float()
    obs_shape = tuple(int(d) for d in model.obs_shape)
    info = {
        "env": env_id,
        "recipe": cfg.get("recipe"),
        "checkpoint": str(checkpoint),
        "obs_shape": list(obs_shape),
        "obs_dtype": str(_obs_dtype(env_id, obs_shape)).removeprefix("torch."),
        "action": "index" if num_actions is not None else "box",
        "num_actions": num_actions,
        "action_low": None if low is None else low.tolist(),
        "action_high": None if high is None else high.tolist(),
    }
    return GreedyPolicy(model, network, low, high).eval(), info


def _obs_dtype(env_id: str, obs_shape: tuple[int, ...]) -> torch.dtype:
    """The dtype the env gives: float32 for a flat observation; an image's own (uint8 Atari, bool
    MinAtar), uint8 when the env cannot be asked (an id only the user's factory knows)."""
    if len(obs_shape) != 3:
        return torch.float32
    if atari.is_atari(env_id):  # known without starting the emulator (seconds)
        return torch.uint8
    if env_id.startswith("MinAtar/"):
        return torch.bool
    try:
        return env_info(env_id).obs_dtype
    except Exception:
        return torch.uint8


def export_program(run_dir: str | Path, out: str | Path, checkpoint: str = "best") -> Path:
    """Write the run's :class:`GreedyPolicy` as a ``torch.export`` program (``.pt2``) with a dynamic
    batch dimension and ``distrl.json`` (:func:`program_info`) beside it in the archive."""
    policy, info = program_info(run_dir, checkpoint)
    dtype = getattr(torch, info["obs_dtype"])
    example = torch.zeros((2, *info["obs_shape"]), dtype=dtype)
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    program = torch.export.export(policy, (example,), dynamic_shapes=({0: batch},))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, out, extra_files={"distrl.json": json.dumps(info)})
    return out


def export_policy(run_dir: str | Path, out: str | Path, **kwargs) -> Path:
    """Write :func:`~distrl.nn.trained_policy.load_policy`'s actor to ``out`` whole (``torch.save`` of
    the module); load it back with ``torch.load(out, weights_only=False)`` where torch, tensordict,
    torchrl and distrl are installed (the pickle names their classes).

    A whole module cannot be loaded weights-only: ``weights_only=False`` runs whatever the file
    names, so load only an export you made or got from someone you trust. For a reader who should
    not have to trust the file, share the run's ``config.json`` and a checkpoint instead:
    :func:`~distrl.nn.trained_policy.load_policy` reads the checkpoint weights-only and rebuilds the
    module from code; or export ``--format pt2``, which holds a graph of tensor operations, no pickle."""
    actor = load_policy(run_dir, **kwargs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(actor, out)
    return out


def main(argv: list[str]) -> int:
    """``distrl export-policy RUN_DIR OUT``: one line on stderr and status 2 on bad input."""
    from distrl.runtime.args import OneLineParser

    p = OneLineParser(
        prog="distrl export-policy",
        description="Write a run's trained policy to one file: a TorchRL actor module (torch.save of the whole "
        "module; load with torch.load(OUT, weights_only=False), which runs what the file names: load only "
        "exports you trust), or with --format pt2 a torch.export program of the greedy policy that loads "
        "with torch alone: torch.export.load(OUT).module()(obs) -> action.",
    )
    p.add_argument("run_dir", help="the run directory (--run-dir of distrl train)")
    p.add_argument("out", help="file to write, e.g. policy.pt (torchrl) or policy.pt2 (pt2)")
    p.add_argument(
        "--checkpoint",
        default="best",
        help="best (default: checkpoints/best.pt), last (the final policy) or a checkpoint file",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="torchrl",
        help="torchrl: the TorchRL actor (needs distrl to load); pt2: the greedy policy as a torch.export "
        "program (torch alone)",
    )
    p.add_argument("--sample", action="store_true", help="sample actions by default instead of the greedy mode")
    # Without either flag, discrete actions are encoded as the training env took them (load_policy).
    encoding = p.add_mutually_exclusive_group()
    encoding.add_argument(
        "--categorical-actions",
        action="store_true",
        help="discrete actions as indices (GymEnv(categorical_action_encoding=True)) whatever "
        "the training env took (default: as it took them; one-hot for a gymnasium id)",
    )
    encoding.add_argument(
        "--one-hot-actions",
        action="store_true",
        help="discrete actions one-hot (GymEnv's default) whatever the training env took",
    )
    args = p.parse_args(argv)
    try:
        if args.format == "pt2":
            if args.sample or args.one_hot_actions:
                raise ValueError(
                    "--format pt2 plays the greedy action as an index: --sample and --one-hot-actions are torchrl's"
                )
            out = export_program(args.run_dir, args.out, args.checkpoint)
            print(f"[distrl] wrote {out}: torch.export.load({str(out)!r}).module()(obs) gives the greedy action")
            return 0
        spec = None
        if args.categorical_actions or args.one_hot_actions:
            cfg, state = load_run(args.run_dir, args.checkpoint)
            _, num_actions, _ = build_model(cfg, state["model"], policy_network(state))
            if num_actions is None:
                flag = "--categorical-actions" if args.categorical_actions else "--one-hot-actions"
                raise ValueError(f"{flag}: the run's policy has continuous actions")
            spec = Categorical(num_actions) if args.categorical_actions else OneHot(num_actions)
        out = export_policy(args.run_dir, args.out, checkpoint=args.checkpoint, sample=args.sample, action_spec=spec)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"[distrl] wrote {out}: torch.load({str(out)!r}, weights_only=False) gives the TorchRL actor")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
