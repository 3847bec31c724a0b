"""gymnax's MinAtar PPO table run here: ``vecenv --experiment minatar_gymnax`` on the five torch
games, each run's last policy scored three ways, the median over seeds beside gymnax's figure.

    python -m experiments.minatar_table --runs '/tmp/m44_{game}_s{seed}' --seeds 0-2 \\
        [--evaluate] [--plot docs/img/minatar_gymnax]

``{game}`` is the lower-case game (``spaceinvaders``); each run directory is one
``python launch/train.py vecenv --experiment minatar_gymnax --env MinAtar/<Game>-v1 --seed S --run-dir DIR``.
Its scores are ``distrl eval DIR --checkpoint last --episodes 100 --policy greedy|sample`` (the
package's env, distrl's 10,000-step limit) written as ``DIR/eval_last_<policy><rules>.json``:

* ``_gymnax``: ``--sticky-actions 0 --max-steps 1000``, the env gymnax scored on (its MinAtar of
  April 2023: no sticky actions, episodes cut at 1,000 steps; Freeway uncut, its clock ends at 2,500);
* ``_1000``: ``--max-steps 1000``, the package's sticky actions (0.1) (Freeway: uncut);
* none: the package's env as trained, uncut.

``--evaluate`` plays the ones missing first. gymnax's figures are its README's PPO row (the mean
return of 164 episodes of the sampled policy after 10M steps); Seaquest has none. ``--plot PREFIX``
writes ``PREFIX_steps.png`` and ``PREFIX_time.png``: each game's training return (the sampled
policy, last 100 episodes) against env steps and against minutes, a line per seed, gymnax's figure dashed.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from distrl.studies.sweep import parse_seeds

#: game -> gymnax's PPO figure at 10M steps (gymnax README, "checkpoint" table); None: no row
GYMNAX = {"Asterix": 15.0, "Breakout": 28.0, "Freeway": 58.0, "SpaceInvaders": 131.0, "Seaquest": None}
#: (file suffix, extra ``distrl eval`` arguments, column title)
RULES = (
    ("_gymnax", ["--sticky-actions", "0", "--max-steps", "1000"], "no sticky, cut at 1,000 (gymnax's env)"),
    ("_1000", ["--max-steps", "1000"], "sticky 0.1, cut at 1,000"),
    ("", [], "sticky 0.1, uncut"),
)
POLICIES = ("sample", "greedy")


def eval_args(game: str, suffix: str, extra: list[str]) -> list[str]:
    """``distrl eval``'s options of one column; Freeway is never cut (its clock ends it at 2,500)."""
    if game == "Freeway" and "--max-steps" in extra:
        i = extra.index("--max-steps")
        return extra[:i] + extra[i + 2 :]
    return extra


def file_of(game: str, policy: str, suffix: str) -> str:
    """The evaluation's file name; Freeway's cut column is its uncut one (nothing to cut)."""
    return f"eval_last_{policy}{'' if game == 'Freeway' and suffix == '_1000' else suffix}.json"


def evaluate_missing(run: Path, game: str) -> None:
    from distrl.studies.evaluate import main as eval_main

    for suffix, extra, _ in RULES:
        for policy in POLICIES:
            out = run / file_of(game, policy, suffix)
            if not out.exists():
                argv = [str(run), "--checkpoint", "last", "--episodes", "100", "--policy", policy, "--out", str(out)]
                if eval_main(argv + eval_args(game, suffix, extra)) != 0:
                    raise SystemExit(f"error: distrl eval failed on {run}")


def cell(runs: list[Path], name: str) -> str:
    """The median over the runs that have ``name``, and each run's mean."""
    means = [json.loads((r / name).read_text())["mean"] for r in runs if (r / name).is_file()]
    if not means:
        return "-"
    return f"**{statistics.median(means):.1f}** ({', '.join(f'{m:.1f}' for m in means)})"


def table(runs: dict[str, list[Path]]) -> str:
    """Markdown: a row per game, a column per (rules, policy), medians with each seed's mean."""
    cols = [(p, s, f"{'sampled' if p == 'sample' else 'greedy'}, {t}") for s, _, t in RULES for p in POLICIES]
    head = ["game", "gymnax PPO, 10M", "seeds", *(t for _, _, t in cols), "wall (min)", "env steps/s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for game, dirs in runs.items():
        summaries = [json.loads((d / "summary.json").read_text()) for d in dirs]
        ref = GYMNAX[game]
        row = [game, "none published" if ref is None else f"{ref:g}", str(len(dirs))]
        row += [cell(dirs, file_of(game, p, s)) for p, s, _ in cols]
        row.append(", ".join(f"{s['wall_s'] / 60:.1f}" for s in summaries))
        row.append(", ".join(f"{s['fps'] / 1e3:.1f}k" for s in summaries))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot(runs: dict[str, list[Path]], labels: dict[Path, str], prefix: str) -> list[Path]:
    """Training return against env steps and against minutes, a panel per game, a line per run
    (``labels[run]``)."""
    from distrl.logging.plots import load_series, panels, save_figure, style_panel

    written = []
    for x, col, scale, label in (("steps", 0, 1e6, "env steps (millions)"), ("time", 1, 60.0, "minutes")):
        fig, axes = panels(len(runs), width=4.0)
        for ax, (game, dirs) in zip(axes, runs.items()):
            for j, d in enumerate(dirs):
                pts = load_series(d).get("actor/return_mean_100", [])
                ax.plot([p[col] / scale for p in pts], [p[2] for p in pts], color=f"C{j}", label=labels[d])
            if GYMNAX[game] is not None:
                ax.axhline(GYMNAX[game], color="k", ls="--", lw=1, label="gymnax PPO, 10M")
            style_panel(ax, game, label)
        axes[0].set_ylabel("training return (last 100 episodes)")
        written.append(save_figure(fig, f"{prefix}_{x}.png"))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="/tmp/m44_{game}_s{seed}", help="run directory pattern: {game}, {seed}")
    ap.add_argument("--seeds", default="0-2", help="0-2 or 0,3,5; runs without summary.json are left out")
    ap.add_argument("--evaluate", action="store_true", help="play the evaluations a run lacks first")
    ap.add_argument("--plot", metavar="PREFIX", help="write PREFIX_steps.png and PREFIX_time.png")
    args = ap.parse_args()
    runs, labels = {}, {}
    for game in GYMNAX:
        dirs = [Path(args.runs.format(game=game.lower(), seed=s)) for s in parse_seeds(args.seeds)]
        runs[game] = [d for d in dirs if (d / "summary.json").is_file()]
        labels.update({d: f"seed {s}" for d, s in zip(dirs, parse_seeds(args.seeds))})
        if args.evaluate:
            for d in runs[game]:
                evaluate_missing(d, game)
    runs = {g: d for g, d in runs.items() if d}
    print(table(runs))
    if args.plot and runs:
        print("\n".join(str(p) for p in plot(runs, labels, args.plot)))


if __name__ == "__main__":
    main()
