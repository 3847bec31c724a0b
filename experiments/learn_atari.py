"""The Atari learning benchmark: score against minutes and against agent steps, every run scored
the same way, distrl's recipes beside Sample Factory 2 run here and CleanRL's published curve.

    python -m experiments.learn_atari --env ALE/Pong-v5 --budget-s 3600 --seeds 0-2 --recipes sf \\
        --sf2 --out runs/learn-pong            # runs everything, one run after the other, then reports
    python -m experiments.learn_atari --report-only --out runs/learn-pong --runs /tmp/p1 /tmp/p2

What is run: ``distrl compare`` for the recipes (each recipe's ``atari`` preset, no early stop) and
``experiments/sf2_learn.py`` for Sample Factory 2 (its own Atari defaults, the core count
adjusted), each seed a run of its own, nothing else on the machine. What is scored: the full-game
evaluations every run makes (distrl: ``atari.eval_epsilon`` 0.05 over the policy's mode, whole
games of the ``-v5`` env, sticky actions 0.25, every ``run.eval_interval_s``; SF2: its checkpoints
evaluated by the same protocol), as a step function: a run's score at a time or a step count is
its latest evaluation at or before it. Across seeds: the median and the range. CleanRL's figures
are its published training-episode returns (:data:`CLEANRL`), at the same agent steps.

Writes ``learn.json``, ``learn.md`` (the tables) and ``learn_curves.png`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

from distrl.studies.stats import median_iqr
from distrl.studies.sweep import parse_seeds

ROOT = Path(__file__).resolve().parent.parent
#: CleanRL's PPO (``ppo_atari_envpool.py``, the ``-v5`` ids, no sticky actions: EnvPool's default),
#: training episode returns, mean over its seeds, read off the curves of docs/rl-algorithms/ppo.md
#: in vwxyzjn/cleanrl (docs/atari.md, "The published curve", gives the reading's precision)
CLEANRL = {
    "ALE/Pong-v5": {0.25e6: -20.2, 0.5e6: -19.1, 1e6: -11.3, 1.5e6: 1.8, 2e6: 10.8, 2.5e6: 15.4, 3e6: 17.4,
                    3.5e6: 18.4, 4e6: 18.6, 5e6: 19.7, 10e6: 20.5},
    "ALE/Breakout-v5": {0.25e6: 5.0, 0.5e6: 9.0, 1e6: 17.5, 1.5e6: 25.2, 2e6: 38.5, 2.5e6: 49.8, 3e6: 69.9,
                        3.5e6: 86.6, 4e6: 109.2, 5e6: 169.3, 10e6: 389.6},
}  # fmt: skip
#: SF2's Atari defaults on this machine's 2 cores: its 8 envs and 1,024-sample iterations kept
SF2_LAYOUT = "atari defaults, 8 envs on 2 workers (4 a worker)"
MINUTES = (10, 20, 30, 45, 60, 90)
STEPS = (0.1e6, 0.25e6, 0.5e6, 1e6, 1.5e6, 2e6, 3e6, 4e6, 5e6)


def curve_of_run(run_dir: Path) -> list[tuple[float, float, float]]:
    """A distrl run's evaluations, ``[(minutes, agent steps, score)]`` in order (``summary.json``'s
    ``evals``, or ``metrics.jsonl``'s while the run is going on)."""
    try:
        evals = json.loads((run_dir / "summary.json").read_text())["evals"]
        return [(e["wall_s"] / 60, float(e["env_frames"]), e["return_mean"]) for e in evals]
    except (OSError, KeyError, json.JSONDecodeError):
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        t0 = rows[0]["time"] - 2.0 if rows else 0.0  # the first row comes one log interval after the start
        return [
            ((r["time"] - t0) / 60, float(r["step"]), r["eval/return_mean"]) for r in rows if "eval/return_mean" in r
        ]


def curve_of_sf2(path: Path) -> list[tuple[float, float, float]]:
    """An ``experiments/sf2_learn.py`` record file as ``[(minutes, agent steps, score)]``."""
    data = json.loads(path.read_text())
    return [(r["wall_s"] / 60, float(r["agent_steps"]), r["mean"]) for r in data["checkpoints"]]


def score_at(curve: Sequence[tuple[float, float, float]], x: float, axis: int) -> Optional[float]:
    """The latest score at or before ``x`` on ``axis`` (0: minutes, 1: agent steps); None before
    the first evaluation or past the run's end (a run is not scored beyond what it reached)."""
    if not curve or x > curve[-1][axis] * 1.02:  # 2%: an evaluation lands just short of a round figure
        return None
    before = [p[2] for p in curve if p[axis] <= x * 1.02]
    return before[-1] if before else None


def summarise(curves: dict[str, list[list[tuple[float, float, float]]]], env: str) -> dict:
    """Per source, at each of :data:`MINUTES` and :data:`STEPS`: median, min, max over its seeds
    (only seeds that reached that point), and the best evaluation of each seed."""
    out = {"minutes": {}, "steps": {}, "best": {}}
    for name, runs in curves.items():
        for key, points, axis in (("minutes", MINUTES, 0), ("steps", STEPS, 1)):
            row = {}
            for x in points:
                scores = [s for s in (score_at(c, x, axis) for c in runs) if s is not None]
                if scores:
                    med, _, _ = median_iqr(scores)
                    row[str(x)] = {"median": med, "min": min(scores), "max": max(scores), "seeds": len(scores)}
            out[key][name] = row
        out["best"][name] = [max((p[2] for p in c), default=None) for c in runs]
    out["cleanrl"] = {str(k): v for k, v in CLEANRL.get(env, {}).items()}
    return out


def _cell(c: Optional[dict]) -> str:
    if not c:
        return ""
    if c["seeds"] == 1:
        return f"{c['median']:.1f}"
    return f"{c['median']:.1f} [{c['min']:.1f}, {c['max']:.1f}] ({c['seeds']})"


def markdown(summary: dict, env: str) -> str:
    """The two tables: at equal minutes, at equal agent steps (CleanRL's published column there)."""
    names = list(summary["minutes"])
    lines = [f"# {env}: full-game evaluation, median [min, max] (seeds)", "", "| minutes | " + " | ".join(names) + " |"]
    lines.append("|---" * (len(names) + 1) + "|")
    for m in MINUTES:
        cells = [_cell(summary["minutes"][n].get(str(m))) for n in names]
        if any(cells):
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "| agent steps | " + " | ".join(names) + " | CleanRL (published, training returns) |"]
    lines.append("|---" * (len(names) + 2) + "|")
    published = CLEANRL.get(env, {})
    for s in STEPS:
        cells = [_cell(summary["steps"][n].get(str(s))) for n in names]
        ref = published.get(s)
        if any(cells):
            lines.append(f"| {s / 1e6:g}M | " + " | ".join(cells) + f" | {'' if ref is None else ref} |")
    lines += ["", "Best evaluation of each seed: " + "; ".join(f"{n}: {summary['best'][n]}" for n in names)]
    return "\n".join(lines) + "\n"


def plot(curves: dict, env: str, path: Path) -> None:
    """Score against minutes and against agent steps: every seed a thin line, CleanRL's curve dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, (name, runs) in enumerate(curves.items()):
        for j, c in enumerate(runs):
            for ax, axis in zip(axes, (0, 1)):
                xs = [p[axis] / (1 if axis == 0 else 1e6) for p in c]
                ax.plot(xs, [p[2] for p in c], color=f"C{i}", alpha=0.8, label=name if j == 0 else None)
    ref = CLEANRL.get(env)
    if ref:
        axes[1].plot([k / 1e6 for k in ref], list(ref.values()), "k--", label="CleanRL PPO (published)")
    for ax, xl in zip(axes, ("minutes on this machine", "agent steps (millions)")):
        ax.set_xlabel(xl)
        ax.set_ylabel("full-game score")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[1].set_xlim(0, max([p[1] / 1e6 for runs in curves.values() for c in runs for p in c] or [1]) * 1.05)
    fig.suptitle(env)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_all(args: argparse.Namespace, out: Path) -> None:
    """Every recipe and seed through ``distrl compare``, then SF2's seeds, one after the other."""
    if args.recipes:
        cmd = [sys.executable, "-m", "distrl.train", "compare", "--env", args.env, "--budget-s", str(args.budget_s),
               "--seeds", args.seeds, "--recipes", args.recipes, "--out", str(out / "distrl"),
               "--set", "run.early_stop=false", *sum((["--set", s] for s in args.set), [])]  # fmt: skip
        subprocess.run(cmd, check=False, cwd=ROOT)
    for seed in parse_seeds(args.seeds) if args.sf2 else ():
        cmd = [sys.executable, "-m", "experiments.sf2_learn", "--env", args.env, "--budget-s", str(args.budget_s),
               "--seed", str(seed), "--out", str(out / "sf2" / f"seed_{seed}"), "--venv", args.sf2_venv,
               "--layout", args.sf2_layout]  # fmt: skip
        subprocess.run(cmd, check=False, cwd=ROOT)


def collect(out: Path, extra_runs: Sequence[str]) -> dict[str, list]:
    """The curves found under ``out`` (``distrl/runs.jsonl``'s run directories, ``sf2/*/*.json``)
    and in the run directories named, grouped by source."""
    curves: dict[str, list] = {}
    records = out / "distrl" / "runs.jsonl"
    for line in records.read_text().splitlines() if records.exists() else ():
        rec = json.loads(line)
        if rec.get("run_dir") and Path(rec["run_dir"]).exists():
            curves.setdefault(f"distrl {rec['recipe']}", []).append(curve_of_run(Path(rec["run_dir"])))
    for path in sorted((out / "sf2").glob("*/results.json")):
        curves.setdefault("Sample Factory 2 (here)", []).append(curve_of_sf2(path))
    for run in extra_runs:  # DIR, or LABEL=DIR to keep a variant apart from the preset's seeds
        label, _, path = run.rpartition("=")
        recipe = json.loads((Path(path) / "config.json").read_text())["recipe"]
        curves.setdefault(label or f"distrl {recipe}", []).append(curve_of_run(Path(path)))
    return curves


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env", default="ALE/Pong-v5")
    p.add_argument("--budget-s", type=float, default=3600.0)
    p.add_argument("--seeds", default="0-2")
    p.add_argument("--recipes", default="sf", help="distrl recipes, comma-separated ('' for none)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every recipe")
    p.add_argument("--sf2", action="store_true", help="also train Sample Factory 2 (experiments/sf2_learn.py)")
    p.add_argument("--sf2-venv", default=".venv-sf2", help="Sample Factory 2's venv (experiments/sf2_atari.py)")
    p.add_argument("--sf2-layout", default=SF2_LAYOUT, help="experiments/sf2_atari.py's LAYOUTS")
    p.add_argument("--out", required=True)
    p.add_argument("--runs", nargs="*", default=[], help="more distrl run directories (DIR or LABEL=DIR) to score")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_all(args, out)
    curves = collect(out, args.runs)
    if not curves:
        print(f"learn_atari: no runs found under {out}", file=sys.stderr)
        return 2
    summary = summarise(curves, args.env)
    (out / "learn.json").write_text(json.dumps({"env": args.env, "curves": curves, **summary}, indent=1))
    (out / "learn.md").write_text(markdown(summary, args.env))
    plot(curves, args.env, out / "learn_curves.png")
    print((out / "learn.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
