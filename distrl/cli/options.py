"""The command line of ``distrl train`` (and ``launch/train.py``): options -> a validated
:class:`~distrl.config.Config`.

The recipe is a registered name or ``path/to/file.py:NAME`` (whatever :func:`distrl.recipes.recipe_module`
loads; anything else is the usual one-line error). The config comes from an experiment function (a preset
in the recipe's module, ``--experiment``), then the common options, then ``--set section.field=value``
overrides, in that order. The parser is
:class:`~distrl.runtime.args.OneLineParser` (one-line errors, defaults in ``--help``), every subcommand's.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from pathlib import Path

from distrl.recipes import RECIPE_NAMES, get_recipe, recipe_module, recipe_spec
from distrl.config import Config, from_dict, override
from distrl.runtime.args import OneLineParser, positive_int  # noqa: F401 (positive_int: part of this module's interface)


def factory_recipes() -> list[str]:
    """The registered recipes whose actors step ``--env module:function`` (``Recipe.takes_env_factory``)."""
    return [n for n in RECIPE_NAMES if get_recipe(n).takes_env_factory]


def make_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="distrl train",
        description="Train a distributed-RL recipe: one process, --nproc N processes on this machine, or one\n"
        "process per rank under torchrun (-m distrl.train). RECIPE --help lists the recipe's config fields\n"
        "and experiments.",
    )
    p.add_argument(
        "recipe",
        metavar="RECIPE",
        help=f"architecture to run: {', '.join(RECIPE_NAMES)}, or path/to/file.py:NAME (a Recipe "
        "defined outside distrl, docs/custom_recipe.md)",
    )
    p.add_argument(
        "--experiment",
        help="preset function in the recipe's module giving the base config (e.g. debug); "
        "default: the one that module's ENV_EXPERIMENTS names for --env, else 'default'",
    )
    p.add_argument(
        "--nproc",
        type=positive_int,
        default=1,
        help="processes on this machine, one per rank, listening on 127.0.0.1 only (torchrun --standalone)",
    )
    p.add_argument(
        "--env",
        help="gymnasium environment id (default: the experiment's, CartPole-v1; module:EnvId imports the module "
        "that registers it, as gymnasium.make does), or module:function "
        f"returning a TorchRL env, which {', '.join(factory_recipes())} step (vecenv takes a "
        "batched one through --set algo.env_factory=module:function; docs/torchrl.md)",
    )
    p.add_argument("--seed", type=int, help="base random seed (default: the experiment's)")
    p.add_argument(
        "--total-frames", type=int, help="stop after this many environment frames (default: the experiment's)"
    )
    p.add_argument(
        "--max-time-s", type=float, help="stop after this many seconds of training (default: the experiment's)"
    )
    p.add_argument(
        "--target-return",
        type=float,
        help="stop once the mean return of the last 100 training episodes reaches this "
        "(and a greedy evaluation of the policy confirms it; otherwise training goes on); "
        "default: the experiment's, mostly none",
    )
    p.add_argument(
        "--run-dir",
        help="run directory (config, metrics, checkpoints, summary.json, W&B run); "
        "default: runs/<recipe>-<env>-<time>-<random>, new per job",
    )
    p.add_argument(
        "--logger",
        choices=("wandb", "csv", "none"),
        help="metrics backend beside metrics.jsonl; wandb runs offline unless WANDB_MODE says otherwise "
        "(default: the experiment's, csv)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir from its newest checkpoint, with its saved config "
        "(options and --set given now apply on top, e.g. a larger --total-frames)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config field, e.g. --set algo.lr=3e-4 (repeatable; see --print-config)",
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    p.add_argument("--print-summary", action="store_true", help="print summary.json at the end")
    return p


def experiment_config(recipe: str, experiment: str) -> Config:
    """The config returned by the preset ``<experiment>()`` of ``distrl/recipes/<recipe>/recipe.py``."""
    module = recipe_module(recipe)
    fn = getattr(module, experiment, None)
    if not callable(fn) or experiment.startswith("_"):
        names = [
            n
            for n, v in vars(module).items()
            if callable(v)
            and not n.startswith("_")
            and getattr(v, "__module__", "") == module.__name__
            and n[0].islower()
        ]
        raise ValueError(f"unknown experiment {experiment!r} for {recipe}; known: {', '.join(sorted(names))}")
    return fn()


def experiment_names(recipe: str) -> dict[str, str]:
    """``{name: first line of its docstring}`` of the recipe's experiment functions."""
    module = recipe_module(recipe)
    return {
        n: (v.__doc__ or "").strip().splitlines()[0] if v.__doc__ else ""
        for n, v in sorted(vars(module).items())
        if callable(v) and n[0].islower() and getattr(v, "__module__", "") == module.__name__
    }


def recipe_help(argv: list[str]) -> str:
    """What ``RECIPE --help`` adds to the generic help: the recipe's experiments and every config
    field (name, type, default, doc); empty when no recipe is named (the generic help stays short)."""
    recipe = next((a for a in argv if a in RECIPE_NAMES or ".py:" in a), None)
    if recipe is None:
        return ""
    from distrl.cli.help import format_fields

    r = get_recipe(recipe)
    lines = [f"\n{recipe}: {r.description}", f"ranks: {r.layout}", "\nexperiments (--experiment NAME):"]
    names = experiment_names(recipe)
    width = max(map(len, names))
    lines += [f"  {n:<{width}}  {doc}" for n, doc in names.items()]
    lines += [
        "\nconfig fields (--set NAME=VALUE; defaults of the 'default' experiment):",
        format_fields(experiment_config(recipe, "default")),
    ]
    return "\n".join(lines)


def default_experiment(recipe: str, env: str | None) -> str:
    """The experiment to start from when ``--experiment`` is not given.

    :data:`distrl.recipes.base.ENV_PRESETS` maps env ids to the preset tuned for them (``atari`` for
    ``ALE/*``, ``mujoco`` for gymnasium's MuJoCo ids, ``minatar``), for every recipe module that defines
    that preset; a module's own ``ENV_EXPERIMENTS`` adds to it or overrides it, so that ``vecenv --env
    Pendulum-v1`` gets Pendulum's settings rather than CartPole's with Pendulum swapped in. Any other env
    starts from ``default``. A key may be a pattern (``"ALE/*"``: every Atari game); an exact id wins.
    """
    from distrl.recipes.base import ENV_PRESETS

    module = recipe_module(recipe)
    table = {env: name for env, name in ENV_PRESETS.items() if callable(getattr(module, name, None))}
    table |= getattr(module, "ENV_EXPERIMENTS", {})
    if env is None or env in table:
        return table.get(env, "default")
    return next((name for pattern, name in table.items() if fnmatch.fnmatchcase(env, pattern)), "default")


def saved_config(recipe: str, run_dir: str) -> Config:
    """The config ``run_dir`` was started with (its ``config.json``): what ``--resume`` continues."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise ValueError(f"--resume: {run_dir} is not a run directory (no config.json)")
    data = json.loads(path.read_text())
    if recipe_spec(data.get("recipe") or "") != recipe_spec(recipe):  # a file spec's spellings are one recipe
        raise ValueError(f"--resume: {run_dir} is a {data.get('recipe')!r} run, not {recipe!r}")
    algo = from_dict(type(get_recipe(recipe).default_config().algo), data["algo"])
    return from_dict(Config, {**data, "algo": algo})


def base_config(args: argparse.Namespace) -> Config:
    """What the options apply to: the run's saved config with ``--resume``, else an experiment."""
    if args.resume:
        if not args.run_dir:
            raise ValueError("--resume needs --run-dir (the run to continue)")
        cfg = saved_config(args.recipe, args.run_dir)  # --experiment, if given, is superseded by it
        if args.env and args.env != cfg.run.env:
            raise ValueError(f"--resume: {args.run_dir} is a run on {cfg.run.env}, not {args.env}")
        return override(cfg, **{"run.resume": True})
    experiment = args.experiment or default_experiment(args.recipe, args.env)
    if experiment != "default" and not args.experiment and os.environ.get("RANK", "0") == "0":
        print(
            f"[distrl] --env {args.env}: starting from experiment {experiment!r} (pass --experiment to choose)",
            file=sys.stderr,
        )
    return experiment_config(args.recipe, experiment)


def build_config(args: argparse.Namespace) -> Config:
    """Experiment (or the resumed run's config), then options, then ``--set`` overrides; raises
    ``ValueError`` on bad input."""
    cfg = base_config(args)
    common = {
        "run.env": args.env,
        "run.seed": args.seed,
        "run.total_frames": args.total_frames,
        "run.max_time_s": args.max_time_s,
        "run.target_return": args.target_return,
        "run.run_dir": args.run_dir,
        "run.logger": args.logger,
    }
    cfg = override(cfg, **{k: v for k, v in common.items() if v is not None})
    for item in args.overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        if key == "recipe":
            raise ValueError(f"--set {item}: the recipe is the command's first argument, not a field")
        try:
            cfg = override(cfg, **{key: value.strip()})
        except ValueError as e:
            raise ValueError(f"--set {item}: {e}") from None
        except (TypeError, AttributeError) as e:  # a value the field's checks could not even compare
            raise ValueError(f"--set {item}: bad value for {key} ({e})") from None
    return cfg
