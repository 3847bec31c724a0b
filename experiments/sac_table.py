"""``apex`` with SAC against Stable-Baselines3's SAC on the same machine at equal minutes: the table and
the curves of ``docs/continuous.md``.

    python -m experiments.sac_table --apex '/tmp/sac45/apex_{env}_s{seed}' \\
        --sb3 '/tmp/sac45/sb3_{env}_s{seed}' --envs halfcheetah,hopper --seeds 0-2 \\
        [--minutes 10,20,30] [--plot docs/img/sac]

``{env}`` is the lower-case env name (``halfcheetah``). An ``apex`` run directory is
``python launch/train.py apex --env HalfCheetah-v5 --seed S --set run.eval_interval_s=120
--set run.eval_episodes=10 --run-dir DIR``: its greedy evaluations during the run (the squashed
mean, episode ``i`` seeded ``10_000 + i`` for seed 0), read from ``DIR/summary.json``'s ``evals``. An
SB3 directory is ``python -m experiments.sb3_sac --env HalfCheetah-v5 --seed S --eval-every-s 120
--eval-episodes 10 --out DIR``: its checkpoints scored after training by the same player, read from
``DIR/results.json``. Both are ``(minutes, env steps, mean return)`` points.

A cell is the score a user holds at ``T`` minutes: each run's latest evaluation at or before ``T``
(3 s of slack: a run's last evaluation is taken as it stops; the policy it would stop with, not the
best seen), the median over seeds in bold, then each seed's.
Missing runs are skipped (a cell says how many seeds it has). ``--plot PREFIX`` writes
``PREFIX_time.png`` and ``PREFIX_steps.png``: every run's evaluations against minutes and against
env steps, a panel per env, CleanRL's published curve on the second.

A second table (``--steps``) sets both systems beside CleanRL's published SAC curve
(:data:`CLEANRL_SAC`) at equal env steps: each run's latest evaluation at or before ``S`` steps,
for the runs that reached ``S``. Last, for each env of ``--targets``, how many seeds of each system
reached the score within the longest budget, and when (the first evaluation at or above it).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Optional
from distrl.studies.sweep import parse_seeds

#: (label, what the --apex / --sb3 pattern names) of the two systems, in table order
SYSTEMS = ("apex (distrl)", "SB3 SAC")


def apex_points(run: Path) -> list[tuple[float, int, float]]:
    """``(minutes, env steps, mean return)`` of an ``apex`` run's evaluations, in order."""
    evals = json.loads((run / "summary.json").read_text()).get("evals", [])
    return [(e["wall_s"] / 60, int(e["env_frames"]), float(e["return_mean"])) for e in evals]


def sb3_points(run: Path) -> list[tuple[float, int, float]]:
    """``(minutes, env steps, mean return)`` of an SB3 run's scored checkpoints, in order."""
    records = json.loads((run / "results.json").read_text())["checkpoints"]
    return sorted((r["wall_s"] / 60, int(r["env_steps"]), float(r["mean"])) for r in records)


#: CleanRL's published SAC curve (``sac_continuous_action.py``, its defaults: one update per env step
#: after 5k random steps, batch 256, lr 3e-4 and 1e-3): the mean training episode return over its
#: seeds (sampled actions, smoothed as plotted) at each env-step count, read off the curve images of
#: its SAC page, ``docs/rl-algorithms/sac/HalfCheetah-v2.png`` and ``Hopper-v2.png`` in
#: vwxyzjn/cleanrl at fe8d8a03: the line's pixel rows at each step's column, the axes calibrated on
#: their tick marks and grid lines (a pixel is ~7 points of HalfCheetah's return, ~2 of Hopper's;
#: each value +-50 and +-15). Its ends agree with the page's table (HalfCheetah 9,635 +- 1,424 and
#: Hopper 2,310 +- 343 over the last episodes; the curves end at 10,310 and 2,680). The ``-v2`` envs
#: (mujoco-py) have the rewards of ``-v5``; HalfCheetah's dip at 150k is in the published mean.
CLEANRL_SAC = {
    "halfcheetah": {25_000: 1_050, 50_000: 3_470, 75_000: 4_640, 100_000: 5_440, 125_000: 5_850, 150_000: 5_200,
                    175_000: 6_500, 200_000: 6_790, 250_000: 7_370, 300_000: 7_920, 1_000_000: 10_310},
    "hopper": {25_000: 270, 50_000: 590, 75_000: 1_210, 100_000: 1_370, 125_000: 1_480, 150_000: 1_700,
               175_000: 1_880, 200_000: 1_960, 250_000: 2_300, 300_000: 2_340, 1_000_000: 2_680},
}  # fmt: skip

#: minutes an evaluation may come after a budget and still count for it: a run's last one is taken as
#: it stops, a second or two past its ``max_time_s`` (SB3's last checkpoint is saved at the budget)
SLACK_MIN = 0.05


def at_minutes(points: list[tuple[float, int, float]], minutes: float) -> Optional[float]:
    """The latest evaluation at or before ``minutes`` (+ :data:`SLACK_MIN`; None before the first)."""
    held = [p[2] for p in points if p[0] <= minutes + SLACK_MIN]
    return held[-1] if held else None


def at_steps(points: list[tuple[float, int, float]], steps: int) -> Optional[float]:
    """The latest evaluation at or before ``steps`` env steps; None before the first, or when the run
    stopped short of ``steps``."""
    held = [p[2] for p in points if p[1] <= steps]
    return held[-1] if held and points[-1][1] >= steps else None


def first_reach(points: list[tuple[float, int, float]], target: float, minutes: float) -> Optional[tuple[float, int]]:
    """``(minutes, env steps)`` of the first evaluation at or above ``target`` within ``minutes``
    (+ :data:`SLACK_MIN`); None if none."""
    return next(((m, s) for m, s, r in points if r >= target and m <= minutes + SLACK_MIN), None)


def reach_lines(runs: dict, targets: dict[str, float], minutes: float) -> list[str]:
    """A line per system and env with a target: how many seeds reached it within ``minutes``, and when."""
    lines = []
    for env, target in targets.items():
        for system in SYSTEMS:
            by_seed = runs.get(system, {}).get(env, {})
            if not by_seed:
                continue
            hits = {seed: first_reach(p, target, minutes) for seed, p in sorted(by_seed.items())}
            when = ", ".join(
                f"seed {seed}: " + (f"{h[0]:.1f} min ({h[1]:,} steps)" if h else "no") for seed, h in hits.items()
            )
            n = sum(h is not None for h in hits.values())
            lines.append(f"- {env}, {system}: {n}/{len(hits)} reached {target:,.0f} within {minutes:g} min ({when})")
    return lines


def load(patterns: dict[str, str], envs: list[str], seeds: list[int]) -> dict[str, dict[str, dict[int, list]]]:
    """``{system: {env: {seed: points}}}`` of the runs that exist."""
    readers = {SYSTEMS[0]: (apex_points, "summary.json"), SYSTEMS[1]: (sb3_points, "results.json")}
    out: dict[str, dict[str, dict[int, list]]] = {}
    for system, pattern in patterns.items():
        read, marker = readers[system]
        for env in envs:
            for seed in seeds:
                run = Path(pattern.format(env=env, seed=seed))
                if (run / marker).is_file():
                    out.setdefault(system, {}).setdefault(env, {})[seed] = read(run)
    return out


def cell(values: list[Optional[float]]) -> str:
    """``**median** (seed values)`` over the seeds that have a value."""
    have = [v for v in values if v is not None]
    if not have:
        return "-"
    return f"**{statistics.median(have):,.0f}** ({', '.join(f'{v:,.0f}' for v in have)})"


def system_rows(runs: dict, env: str, value_at, columns: list) -> list[tuple[str, dict, list[str]]]:
    """``(system, {seed: points}, cells)`` of each system with runs of ``env``: a cell per column,
    ``value_at(points, column)`` over the seeds."""
    rows = []
    for system in SYSTEMS:
        by_seed = runs.get(system, {}).get(env, {})
        if by_seed:
            rows.append((system, by_seed, [cell([value_at(p, c) for p in by_seed.values()]) for c in columns]))
    return rows


def table(runs: dict, envs: list[str], minutes: list[float]) -> str:
    """The markdown table: a row per system and env, a column per budget."""
    lines = [
        "| env | system | seeds | " + " | ".join(f"{m:g} min" for m in minutes) + " | env steps at the end |",
        "|---|---|---|" + "---|" * len(minutes) + "---|",
    ]
    for env in envs:
        for system, by_seed, cells in system_rows(runs, env, at_minutes, minutes):
            steps = ", ".join(f"{p[-1][1]:,}" for p in by_seed.values() if p)
            lines.append(f"| {env} | {system} | {len(by_seed)} | " + " | ".join(cells) + f" | {steps} |")
    return "\n".join(lines)


def steps_table(runs: dict, envs: list[str], steps: list[int]) -> str:
    """The markdown table at equal env steps: both systems (median, then each seed) and CleanRL's
    published curve (:data:`CLEANRL_SAC`, its training return) at each count."""
    lines = [
        "| env | system | seeds | " + " | ".join(f"{s // 1000}k steps" for s in steps) + " |",
        "|---|---|---|" + "---|" * len(steps),
    ]
    for env in envs:
        for system, by_seed, cells in system_rows(runs, env, at_steps, steps):
            lines.append(f"| {env} | {system} | {len(by_seed)} | " + " | ".join(cells) + " |")
        published = CLEANRL_SAC.get(env, {})
        if published:
            cells = [f"{published[s]:,}" if s in published else "-" for s in steps]
            lines.append(f"| {env} | CleanRL SAC, published (training return) | | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs: dict, envs: list[str], prefix: str) -> list[Path]:
    """Every run's evaluations against minutes and env steps, a panel per env."""
    from distrl.logging.plots import panels, save_figure, style_panel

    written = []
    for x, col, scale, label in (("time", 0, 1.0, "minutes"), ("steps", 1, 1e3, "env steps (thousands)")):
        fig, axes = panels(len(envs))
        for ax, env in zip(axes, envs):
            for j, system in enumerate(SYSTEMS):
                for k, (seed, pts) in enumerate(sorted(runs.get(system, {}).get(env, {}).items())):
                    xs, ys = [p[col] / scale for p in pts], [p[2] for p in pts]
                    ax.plot(xs, ys, color=f"C{j}", ls=("-", "--", ":")[k % 3], label=f"{system}, seed {seed}")
            published = sorted(CLEANRL_SAC.get(env, {}).items())
            if x == "steps" and published:
                top = max(
                    (p[-1][1] for by_seed in runs.values() for p in by_seed.get(env, {}).values() if p), default=0
                )
                last = next((i for i, (s, _) in enumerate(published) if s >= top), len(published) - 1)
                shown = [(s / scale, r) for s, r in published[: last + 1]]  # to the first count past the runs
                ax.plot(*zip(*shown), color="k", marker="o", ms=3, label="CleanRL SAC, published (training return)")
            style_panel(ax, env, label)
        axes[0].set_ylabel("greedy evaluation (mean return)")
        written.append(save_figure(fig, f"{prefix}_{x}.png"))
    return written


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--apex", required=True, help="apex run directories, with {env} and {seed}")
    p.add_argument("--sb3", required=True, help="experiments.sb3_sac output directories, with {env} and {seed}")
    p.add_argument("--envs", default="halfcheetah,hopper", help="lower-case env names, comma-separated")
    p.add_argument("--seeds", default="0-2", help="0-2 or 0,1,2")
    p.add_argument("--minutes", default="10,20,30", help="the budgets of the table's columns")
    p.add_argument("--steps", default="50000,100000,150000,200000", help="the env steps of the second table")
    p.add_argument("--targets", default="halfcheetah=5000,hopper=2500", help="env=score: who reached it, and when")
    p.add_argument("--plot", default=None, help="write PREFIX_time.png and PREFIX_steps.png")
    args = p.parse_args(argv)
    envs, minutes = args.envs.split(","), [float(m) for m in args.minutes.split(",")]
    runs = load({SYSTEMS[0]: args.apex, SYSTEMS[1]: args.sb3}, envs, parse_seeds(args.seeds))
    if not runs:
        raise SystemExit("sac_table: no run found under --apex or --sb3")
    print(table(runs, envs, minutes))
    print()
    print(steps_table(runs, envs, [int(x) for x in args.steps.split(",")]))
    targets = {env: float(score) for env, score in (t.split("=") for t in args.targets.split(",") if t)}
    print()
    print("\n".join(reach_lines(runs, {e: t for e, t in targets.items() if e in envs}, max(minutes))))
    if args.plot:
        for path in plot(runs, envs, args.plot):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
