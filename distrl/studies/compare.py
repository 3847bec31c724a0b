"""``distrl compare``: every recipe on the same env, budget and seeds, one run after the other on
this machine, measured the way a sweep measures (no early stop, the target timed, a greedy
evaluation at the end), and the seed's comparison table written with the figures measured here.

    distrl compare --env CartPole-v1 --budget-s 120 --out runs/compare-cartpole
    distrl compare --recipes impala,seed,experiments/examples/custom/seed_apex.py:recipe --seeds 0-2 --out DIR

Everything is checked before the first run starts (each recipe's config, env and process count
are planned as ``distrl train`` plans them): bad input is one line on stderr and exit status 2. A
run that fails is recorded as failed, with its log, and the comparison goes on; the exit status is
then 1. ``DIR`` gets ``runs.jsonl`` (one record per run, as they finish), ``runs/<recipe>/seed_<n>``
(run directories and logs), and ``compare.json``, ``compare.md`` and the PNGs (distrl/studies/compare_report.py).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import distrl
from distrl.studies import child_runs

#: processes of a recipe whose ``Recipe.compare_nproc`` does not say, raised to its minimum world size
OTHER_NPROC = 4
#: seconds a run gets past its budget (start-up, final evaluation, shutdown) before it is stopped
GRACE_S = 120.0
#: the budget when neither ``--budget-s`` nor ``--frames`` is given
DEFAULT_BUDGET_S = 120.0
#: the custom recipe a checkout ships (docs/custom_recipe.md): compared by default beside the
#: registered six when the command runs where that file is (a checkout's root)
EXAMPLE_RECIPE = "experiments/examples/custom/seed_apex.py:recipe"


def default_specs() -> list[str]:
    """Every registered recipe, and the shipped custom one when it is at hand."""
    from distrl.recipes import RECIPE_NAMES

    example = [EXAMPLE_RECIPE] if Path(EXAMPLE_RECIPE.partition(":")[0]).is_file() else []
    return [*RECIPE_NAMES, *example]


@dataclass(frozen=True)
class Entry:
    """One recipe of the comparison, planned."""

    label: str  #: its name in the table and its folder under ``runs/``
    spec: str  #: what ``distrl train`` takes: a registered name or path/to/file.py:NAME
    nproc: int
    experiment: str
    layout: str
    max_time_s: float  #: the run's time budget as its config has it (``--budget-s`` or the experiment's)
    skipped: Optional[str] = None  #: why it does not run (only when all recipes were asked for)


def nproc_option(text: str) -> int | dict[str, int]:
    """``--nproc``: ``N`` for every recipe, or ``recipe=N,...`` (the others keep their default)."""
    from distrl.runtime.args import positive_int

    if "=" not in text:
        return positive_int(text)
    out = {}
    for part in text.split(","):
        name, sep, n = part.partition("=")
        if not sep or not name.strip():
            raise argparse.ArgumentTypeError(f"expects N or recipe=N,..., got {text!r}")
        out[name.strip()] = positive_int(n)
    return out


def make_parser() -> argparse.ArgumentParser:
    from distrl.runtime.args import OneLineParser
    from distrl.recipes import RECIPE_NAMES

    from distrl.recipes import get_recipe

    table = ", ".join(f"{k} {get_recipe(k).compare_nproc}" for k in RECIPE_NAMES if get_recipe(k).compare_nproc)
    p = OneLineParser(
        prog="distrl compare",
        allow_abbrev=False,
        description=(
            "Run every recipe (or --recipes) on the same env, budget and seeds, one run after the other on\n"
            "this machine, without early stop, and write the seed's comparison table with what was measured:\n"
            "compare.md, compare.json, return against time and frames, fps bars, policy lag histograms.\n\n"
            "    distrl compare --env CartPole-v1 --budget-s 120 --out runs/compare-cartpole\n"
            "    distrl compare --recipes impala,seed,experiments/examples/custom/seed_apex.py:recipe \\\n"
            "        --seeds 0-2 --out DIR\n\n"
            "Everything is checked before the first run starts; a run that fails is recorded as failed with\n"
            "its log and the comparison goes on (exit status 1). Each recipe starts from the experiment\n"
            "distrl train would pick for --env, with its own network unless --set says otherwise.\n"
            f"Processes per recipe unless --nproc says: {table}; any other recipe {OTHER_NPROC}."
        ),
    )
    p.add_argument(
        "--recipes",
        help=f"comma-separated registered names or path/to/file.py:NAME (default: every "
        f"registered recipe: {', '.join(RECIPE_NAMES)}, and {EXAMPLE_RECIPE} where "
        "that file is; skipping any that cannot run --env)",
    )
    p.add_argument("--env", default="CartPole-v1", help="gymnasium id, or module:function of a TorchRL env factory")
    p.add_argument(
        "--budget-s",
        type=float,
        help=f"seconds of training per run (default: {DEFAULT_BUDGET_S:g}, unless --frames is given)",
    )
    p.add_argument("--frames", type=int, help="env frames per run (with --budget-s: whichever comes first)")
    p.add_argument("--seeds", default="0", help="seeds per recipe: 0-2, 0,3,5 (each a run of its own)")
    p.add_argument(
        "--nproc",
        type=nproc_option,
        metavar="N|RECIPE=N,...",
        help="processes per run: N for every recipe, or recipe=N,... (default: the table above)",
    )
    p.add_argument(
        "--target-return",
        type=float,
        help="the score whose first crossing is timed (default: the env's reward threshold, "
        "475 for CartPole-v1; an env without one gets no time to target)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every recipe, e.g. --set net.hidden=64,64 (repeatable)",
    )
    p.add_argument("--out", help="output folder (default: runs/compare-<env>-<time>); must be new or empty")
    p.add_argument(
        "--logger",
        choices=("none", "wandb"),
        default="none",
        help="wandb: also one offline W&B run in --out with the table and the plots",
    )
    p.add_argument("--report-only", action="store_true", help="rewrite the report from --out's runs; run nothing")
    return p


def default_target(env: str) -> Optional[float]:
    """The env's ``reward_threshold`` (CartPole-v1: 475), ``None`` when it has none; ``ValueError``
    for an env id gymnasium does not know."""
    from distrl.envs.gym import check_env_id, is_factory
    from distrl.envs.info import gym_id

    check_env_id(env)
    if is_factory(env):
        return None
    import gymnasium

    return gymnasium.spec(gym_id(env)).reward_threshold  # a module:EnvId's id, its module imported


def plan_entries(args: argparse.Namespace, out: Path, seed: int, target: Optional[float]) -> list[Entry]:
    """Each recipe planned as ``distrl train`` would plan its first run; ``ValueError`` (one line,
    naming the recipe) for a recipe given by name that cannot run, a skipped entry when every
    recipe was asked for."""
    from distrl.cli.options import build_config, default_experiment
    from distrl.recipes import get_recipe
    from distrl.cli.runner import plan

    explicit = args.recipes is not None
    specs = [s.strip() for s in args.recipes.split(",")] if explicit else default_specs()
    if not all(specs) or len(set(specs)) != len(specs):
        raise ValueError(f"--recipes expects distinct comma-separated recipes, got {args.recipes!r}")
    nproc = args.nproc if isinstance(args.nproc, dict) else {}
    entries, labels = [], set()
    for spec in specs:
        recipe = get_recipe(spec)
        label = recipe.name if recipe.name not in labels else f"{recipe.name}-{len(labels)}"
        labels.add(label)
        n = (
            args.nproc
            if isinstance(args.nproc, int)
            else nproc.get(spec, nproc.get(label)) or recipe.compare_nproc or max(OTHER_NPROC, recipe.min_world_size)
        )
        experiment = default_experiment(spec, args.env)
        ns = argparse.Namespace(
            recipe=spec,
            experiment=experiment,
            resume=False,
            env=args.env,
            seed=seed,
            run_dir=str(out / "runs" / label / f"seed_{seed}"),
            total_frames=args.frames,
            max_time_s=args.budget_s,
            target_return=target,
            logger=None,
            overrides=[*args.overrides, "run.early_stop=false"],
        )
        try:
            p = plan(build_config(ns), n)
        except ValueError as e:
            if explicit:
                raise ValueError(f"{spec}: {e}") from None
            entries.append(Entry(label, spec, n, experiment, recipe.layout, 0.0, skipped=str(e)))
            continue
        entries.append(Entry(label, spec, n, experiment, recipe.layout, p.cfg.run.max_time_s))
    unknown = set(nproc) - {e.spec for e in entries} - {e.label for e in entries}
    if unknown:
        raise ValueError(f"--nproc names {', '.join(sorted(unknown))}, not among the recipes compared")
    return entries


def _echo(line: str) -> None:
    """The progress display shows a run's own lines (``[distrl] ...``, ``[impala] frames ...``,
    ``error: ...``); everything else (warnings, tracebacks) is in its log."""
    if line.startswith(("[", "error")):
        print("  " + line, flush=True)


def run_entries(
    entries: list[Entry], out: Path, seeds: list[int], target: Optional[float], train_args: list[str]
) -> None:
    """Run every (recipe, seed), one at a time, appending each record to ``runs.jsonl``."""
    from distrl.studies.child_runs import run_logged
    from distrl.studies.compare_report import hold_floor
    from distrl.studies.sweep import describe, seed_command, seed_result

    with open(out / "runs.jsonl", "a") as book:

        def record(rec: dict) -> None:
            book.write(json.dumps(rec) + "\n")
            book.flush()

        for i, e in enumerate(entries, 1):
            base = {"label": e.label, "spec": e.spec, "nproc": e.nproc, "experiment": e.experiment, "layout": e.layout}
            if e.skipped:
                print(f"[compare] {i}/{len(entries)} {e.label}: skipped ({e.skipped})", flush=True)
                record(base | {"skipped": e.skipped})
                continue
            for seed in seeds:
                run_dir = out / "runs" / e.label / f"seed_{seed}"
                log = run_dir.parent / f"seed_{seed}.log"
                run_dir.parent.mkdir(parents=True, exist_ok=True)
                cmd = seed_command(e.spec, seed, run_dir, e.nproc, target, [*train_args, "--experiment", e.experiment])
                print(
                    f"[compare] {i}/{len(entries)} {e.label}, seed {seed}, {e.nproc} process(es): started; log {log}",
                    flush=True,
                )
                res = run_logged(cmd, log, e.max_time_s * 1.5 + GRACE_S, echo=_echo)
                r = seed_result(run_dir, seed, target, hold_floor(target))
                verdict = describe(r) if res["exit_code"] == 0 else f"FAILED (exit {res['exit_code']}; log {log})"
                print(
                    f"[compare] {i}/{len(entries)} {e.label}, seed {seed}: {verdict}, {res['wall_s']:.0f} s", flush=True
                )
                record(base | {"seed": seed, "run_dir": str(run_dir), "log": str(log), "cmd": shlex.join(cmd), **res})


def main(argv: Optional[list[str]] = None) -> int:
    """``distrl compare``; the exit status (0: every run finished, 1: some failed, 2: bad input, 130: Ctrl-C)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = make_parser().parse_args(argv)
    from distrl.studies.sweep import parse_seeds

    budget = args.budget_s if args.budget_s is not None or args.frames is not None else DEFAULT_BUDGET_S
    args.budget_s = budget
    env_name = "".join(c if c.isalnum() or c in "_.-" else "_" for c in args.env)
    out = Path(args.out or f"runs/compare-{env_name}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        seeds = parse_seeds(args.seeds)
        if budget is not None and budget <= 0:
            raise ValueError(f"--budget-s must be > 0, got {budget:g}")
        if args.frames is not None and args.frames < 1:
            raise ValueError(f"--frames must be >= 1, got {args.frames}")
        if args.report_only and not ((out / "runs.jsonl").is_file() and (out / "meta.json").is_file()):
            raise ValueError(f"--report-only: {out} holds no comparison (no runs.jsonl, meta.json)")
        if not args.report_only and out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ValueError(f"--out {out} already holds files: choose a new folder (or add --report-only)")
        saved = json.loads((out / "meta.json").read_text()) if args.report_only else {}
        target = (
            args.target_return
            if args.target_return is not None
            else saved["target_return"]
            if "target_return" in saved
            else default_target(args.env)
        )
        entries = [] if args.report_only else plan_entries(args, out, seeds[0], target)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    spent = " or ".join(
        x for x in (f"{budget:g} s" if budget else "", f"{args.frames:,} frames" if args.frames else "") if x
    )
    interrupted = False
    if args.report_only:  # the command, date and machine of the runs, not of this rewrite
        meta = {**saved, "target_return": target}
    else:
        meta = {
            "command": "distrl compare " + shlex.join(argv),
            "env": args.env,
            "budget": f"{spent} per run",
            "budget_s": budget,
            "frames": args.frames,
            "seeds": args.seeds,
            "target_return": target,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": child_runs.machine(),
            "distrl": distrl.__version__,
        }
        out.mkdir(parents=True, exist_ok=True)
        (out / "meta.json").write_text(json.dumps(meta, indent=2))
        train_args = [
            "--env",
            args.env,
            *(["--max-time-s", str(budget)] if budget else []),
            *(["--total-frames", str(args.frames)] if args.frames else []),
            *(a for item in args.overrides for a in ("--set", item)),
        ]
        print(
            f"[compare] {len(entries)} recipes x {len(seeds)} seed(s) on {args.env}, {spent} each, into {out}",
            flush=True,
        )
        try:
            run_entries(entries, out, seeds, target, train_args)
        except KeyboardInterrupt:
            print("[compare] interrupted: the report holds the runs that finished", file=sys.stderr, flush=True)
            interrupted = True
    from distrl.studies.compare_report import to_wandb, write_report

    rows = write_report(out, meta)
    print((out / "compare.md").read_text(), flush=True)
    if args.logger == "wandb":
        print(f"[compare] W&B run: {to_wandb(out, rows, json.loads((out / 'compare.json').read_text())['meta'])}")
    print(f"[compare] wrote {out / 'compare.md'}, compare.json and the plots", flush=True)
    if interrupted:
        return 130
    return 0 if all(r["status"] in ("ok", "skipped") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
