"""What ``distrl compare`` writes from its runs: ``compare.json``, ``compare.md``, the PNGs and the
W&B run.

The input is ``runs.jsonl`` in the output folder, one record per launched run (recipe, seed,
processes, run directory, log, exit status, wall and CPU seconds) or per skipped recipe, and each
run directory's ``summary.json`` and ``metrics.jsonl``. :func:`recipe_row` folds a recipe's seeds
into one row: medians over seeds, the time to target as the sweep reports it
(:func:`distrl.studies.sweep.aggregate`), lag histograms summed. A figure a recipe does not record is
``None``, never a zero.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

from distrl.studies.stats import median_iqr
from distrl.studies.compare_plots import write_plots
from distrl.studies.sweep import aggregate, seed_result

#: a run holds the target when its training mean never falls below this share of it afterwards
#: (``distrl sweep``'s fixed 250 is CartPole's; a comparison runs on any env's scale)
HOLD_FRACTION = 0.5


def table_row(spec: str, name: str) -> tuple[str, ...]:
    """The recipe's row of the seed's comparison table (``Recipe.table_row``): architecture, year, actor
    side, learner, sync, best for; its name and dashes for a recipe without one or no longer loadable."""
    from distrl.recipes import get_recipe

    try:
        row = get_recipe(spec).table_row
    except ValueError:  # a custom recipe's file moved since the comparison ran
        row = ()
    return row or (name, "-", "-", "-", "-", "-")


def hold_floor(target: Optional[float]) -> float:
    """The floor a run's training mean must stay above after reaching ``target``."""
    return HOLD_FRACTION * target if target is not None else float("-inf")


PLOTS = ("return_vs_time.png", "return_vs_frames.png", "fps.png", "policy_lag.png")


def read_records(out: Path) -> list[dict[str, Any]]:
    """``runs.jsonl``'s records in order (a torn last line, from a killed compare, skipped)."""
    records = []
    for line in (out / "runs.jsonl").read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def run_measures(rec: dict[str, Any], target: Optional[float]) -> dict[str, Any]:
    """One run: the sweep's seed result plus what ``summary.json`` records for the comparison."""
    run_dir = Path(rec["run_dir"])
    out = seed_result(run_dir, rec["seed"], target, hold_floor(target))
    out.update(
        exit_code=rec.get("exit_code"),
        log=rec.get("log"),
        run_dir=str(run_dir),
        killed=rec.get("killed"),
        cpu_cores_used=rec["cpu_s"] / rec["wall_s"] if rec.get("cpu_s") and rec.get("wall_s") else None,
    )
    out["ok"] = out["finished"] and rec.get("exit_code") == 0
    try:
        s = json.loads((run_dir / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return out
    skip = s.get("frame_skip") or 1
    out.update(
        frame_skip=skip,
        frames_per_s=s.get("frames_per_s") if skip > 1 else None,
        env_frames=s.get("env_frames"),
        policy_lag_max=s.get("policy_lag_max"),
        policy_lag_hist={int(k): v for k, v in (s.get("policy_lag_hist") or {}).items()},
        inference_batch_fill=s.get("inference_batch_fill_mean"),
        bytes_per_env_step=s.get("bytes_per_env_step"),
        time_budget=s.get("time_budget") or {},
    )
    return out


def _median(xs: Sequence[Optional[float]]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return median_iqr(xs)[0] if xs else None


def busy_shares(time_budget: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each role's share of its wall time outside ``wait`` (distrl/logging/timing.py's phases)."""
    return {role: round(1.0 - phases.get("wait", 0.0), 3) for role, phases in time_budget.items() if phases}


def recipe_row(records: Sequence[dict[str, Any]], target: Optional[float]) -> dict[str, Any]:
    """One recipe's row of ``compare.json`` from its records (every seed, or one skipped record)."""
    first = records[0]
    row: dict[str, Any] = {
        "recipe": first["label"],
        "spec": first["spec"],
        "nproc": first.get("nproc"),
        "experiment": first.get("experiment"),
        "layout": first.get("layout"),
    }
    if first.get("skipped"):
        return row | {"status": "skipped", "reason": first["skipped"], "runs": []}
    runs = [run_measures(r, target) for r in records]
    done = [r for r in runs if r["finished"]]
    failed = [r for r in runs if not r["ok"]]
    status = "ok" if not failed else ("failed" if not done else "partly failed")
    reason = "; ".join(
        f"seed {r['seed']}: "
        + ("stopped past its time limit" if r.get("killed") else f"exit {r['exit_code']}")
        + f", log {r['log']}"
        for r in failed
    )
    row |= {
        "status": status,
        "reason": reason or None,
        "seeds": [r["seed"] for r in runs],
        "logs": [r["log"] for r in runs],
    }
    agg = aggregate(runs) if done else None
    ttt = agg["time_to_target_median_s"] if agg else None
    budgets: dict[str, dict[str, list[float]]] = {}
    for r in done:
        for role, phases in r["time_budget"].items():
            for phase, share in phases.items():
                budgets.setdefault(role, {}).setdefault(phase, []).append(share)
    time_budget = {role: {p: round(sum(v) / len(v), 4) for p, v in phases.items()} for role, phases in budgets.items()}
    hist: dict[int, int] = {}
    for r in done:
        for k, v in r["policy_lag_hist"].items():
            hist[k] = hist.get(k, 0) + v
    row |= {
        "fps": _median([r["fps"] for r in done]),
        "frames_per_s": _median([r["frames_per_s"] for r in done]),
        "target_return": target,
        "reached": f"{agg['reached']}/{agg['seeds']}" if agg and target is not None else None,
        "time_to_target_s": None if ttt is None or math.isinf(ttt) or math.isnan(ttt) else ttt,
        "final_eval": _median([r["final_eval"] for r in done]),
        "final_eval_iqm": agg["final_eval_iqm"] if agg and not math.isnan(agg["final_eval_iqm"]) else None,
        "best_eval": _median([r["best_eval"] for r in done]),
        "policy_lag_mean": (
            sum(r["policy_lag_mean"] for r in done) / len(done)
            if done and all(r["policy_lag_mean"] is not None for r in done)
            else None
        ),
        "policy_lag_max": max((r["policy_lag_max"] for r in done if r["policy_lag_max"] is not None), default=None),
        "policy_lag_hist": dict(sorted(hist.items())),
        "inference_batch_fill": _median([r["inference_batch_fill"] for r in done]),
        "bytes_per_env_step": _median([r["bytes_per_env_step"] for r in done]),
        "cpu_cores_used": _median([r["cpu_cores_used"] for r in done]),
        "busy_share_per_role": busy_shares(time_budget) or None,
        "time_budget": time_budget or None,
        "runs": runs,
    }
    return row


def rows_from(out: Path, target: Optional[float]) -> list[dict[str, Any]]:
    """Every recipe's row, in the order the recipes ran."""
    by_label: dict[str, list[dict[str, Any]]] = {}
    for rec in read_records(out):
        by_label.setdefault(rec["label"], []).append(rec)
    return [recipe_row(recs, target) for recs in by_label.values()]


def _num(x: Optional[float], digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """``compare.md``: the seed's table with the measured columns, then every measured figure."""
    target = meta.get("target_return")
    ttt_head = f"time to {target:g} (s)" if target is not None else "time to target (s)"
    lines = [
        f"# distrl compare: {meta['env']}, {meta['budget']}, seeds {meta['seeds']}",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Measured {meta['date']} on {meta['machine']}; one run at a time, no early stop; figures are "
        "medians over seeds.",
        "",
        "| recipe | architecture (year) | actor side: where inference runs | learner | sync | best for | "
        f"processes | env steps/s | {ttt_head} | final greedy eval |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        arch, year, actor, learner, sync, best = table_row(r["spec"], r["recipe"])
        measured = f"{r['status']}: {r['reason']}" if r["status"] in ("skipped", "failed") else None
        ttt = (
            _num(r.get("time_to_target_s"), 1)
            if r.get("time_to_target_s") is not None
            else ("never" if r.get("reached") else "-")
        )
        cells = (
            [measured, "", ""]
            if measured
            else [_num(r["fps"]), f"{ttt} ({r['reached']})" if r.get("reached") else ttt, _num(r["final_eval"], 1)]
        )
        lines.append(
            f"| `{r['recipe']}` | {arch} ({year}) | {actor} | {learner} | {sync} | {best} | "
            f"{r.get('nproc')} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "Architecture, actor side, learner, sync and best for: the seed's table; on this machine every "
        "role runs on the CPU.",
        "",
        "## Measured",
        "",
        "| recipe | status | ranks | frames/s | best eval | policy lag mean / max | inference batch fill | "
        "bytes on the wire / env step | CPU cores used | busy share per role (1 - wait) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["status"] == "skipped":
            lines.append(f"| `{r['recipe']}` | skipped: {r['reason']} |  |  |  |  |  |  |  |  |")
            continue
        lag = "-" if r.get("policy_lag_mean") is None else f"{r['policy_lag_mean']:.2f} / {r['policy_lag_max']}"
        busy = ", ".join(f"{k} {v:.0%}" for k, v in (r.get("busy_share_per_role") or {}).items()) or "-"
        status = r["status"] if not r.get("reason") else f"{r['status']} ({r['reason']})"
        lines.append(
            f"| `{r['recipe']}` | {status} | {r.get('layout') or '-'} | {_num(r.get('frames_per_s'))} | "
            f"{_num(r.get('best_eval'), 1)} | {lag} | {_num(r.get('inference_batch_fill'), 1)} | "
            f"{_num(r.get('bytes_per_env_step'), 1)} | {_num(r.get('cpu_cores_used'), 2)} | {busy} |"
        )
    lines += [
        "",
        "env steps/s: agent steps the learner trained on per second of the run (summary.json's fps); "
        "frames/s: emulator frames where the env skips frames; final greedy eval: the last policy's "
        "greedy evaluation; policy lag in learner updates (a3c: gradient staleness); inference batch fill: "
        "requests per batched forward (seed, sf); CPU cores used: CPU seconds of every process of the run "
        "over its wall time, start-up included; busy share: a role's wall time outside waiting "
        "(summary.json's time_budget). A '-' is a figure the recipe does not record.",
        "",
    ]
    lines += [f"![{name[:-4].replace('_', ' ')}]({name})" for name in meta.get("plots", [])]
    return "\n".join(lines) + "\n"


def _clean(x: Any) -> Any:
    """JSON without ``Infinity``/``NaN`` (not JSON): ``None`` instead."""
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def write_report(out: Path, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """``compare.json``, the PNGs and ``compare.md`` in ``out`` from its ``runs.jsonl``; the rows."""
    rows = rows_from(out, meta.get("target_return"))
    meta = {**meta, "plots": [p.name for p in write_plots(out, rows)]}
    (out / "compare.json").write_text(json.dumps(_clean({"meta": meta, "rows": rows}), indent=2))
    (out / "compare.md").write_text(markdown(rows, meta))
    return rows


def to_wandb(out: Path, rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """One W&B run (offline unless ``WANDB_MODE`` says otherwise) in ``out/wandb``: the table, the
    plots and each recipe's figures as summary values; returns the run's folder."""
    import os

    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    columns = [
        "recipe",
        "status",
        "processes",
        "env_steps_per_s",
        "time_to_target_s",
        "final_eval",
        "policy_lag_mean",
        "policy_lag_max",
        "inference_batch_fill",
        "bytes_per_env_step",
        "cpu_cores_used",
    ]
    keys = [
        "recipe",
        "status",
        "nproc",
        "fps",
        "time_to_target_s",
        "final_eval",
        "policy_lag_mean",
        "policy_lag_max",
        "inference_batch_fill",
        "bytes_per_env_step",
        "cpu_cores_used",
    ]
    data = [
        [None if r.get(k) is None else str(r[k]) if k in ("recipe", "status") else float(r[k]) for k in keys]
        for r in rows
    ]
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", "distrl"),
        dir=str(out),
        job_type="compare",
        name=f"compare-{out.name}",
        config=_clean(meta),
        tags=["compare", str(meta["env"])],
    )
    try:
        images = {f"compare/{name[:-4]}": wandb.Image(str(out / name)) for name in meta.get("plots", [])}
        run.log({"compare/table": wandb.Table(columns=columns, data=data), **images})
        for r in rows:
            for k in keys[3:]:
                if r.get(k) is not None:
                    run.summary[f"{r['recipe']}/{k}"] = r[k]
        return str(Path(run.dir).parent)
    finally:
        run.finish()
