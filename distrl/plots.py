"""Learning curves from run directories, one PNG: return, throughput and policy lag side by side.

Every run writes ``metrics.jsonl`` (one JSON row per progress report: ``step`` = env frames,
``time``, then ``role/metric`` values) and ``summary.json``. :func:`plot_runs` draws any number of
runs on shared axes so recipes can be compared at a glance; the learner also calls it at the end
of a run that logs (``curves.png`` in the run directory). W&B shows the same series once an
offline run is synced; this needs no account and no network.

    python launch/plot.py RUN_DIR [RUN_DIR ...] [--out curves.png] [--x time]
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

#: (metric key, panel title): the panels drawn when a run logs the key.
PANELS: tuple[tuple[str, str], ...] = (
    ("actor/return_mean_100", "training return (mean of last 100 episodes)"),
    ("learner/fps", "env frames / s"),
    ("learner/policy_lag_mean", "policy lag (learner updates)"),
    ("learner/loss", "loss"),
    ("learner/entropy", "policy entropy"),
    ("worker/loss", "loss (on the workers: a3c)"),
    ("worker/entropy", "policy entropy (on the workers: a3c)"),
    ("inference/batch_fill", "inference batch fill (requests)"),
)


def load_series(run_dir: str | Path) -> dict[str, list[tuple[float, float, float]]]:
    """``metrics.jsonl`` as ``{key: [(frames, seconds since the first row, value), ...]}``.

    Rows of a resumed run follow on from the checkpoint's frame count, so the series stay
    monotone in frames; a torn last line (a killed run) is skipped.
    """
    series: dict[str, list[tuple[float, float, float]]] = {}
    path = Path(run_dir) / "metrics.jsonl"
    t0 = None
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        t0 = row["time"] if t0 is None else t0
        for key, value in row.items():
            if key not in ("step", "time") and isinstance(value, (int, float)):
                series.setdefault(key, []).append((float(row["step"]), row["time"] - t0, float(value)))
    return series


def run_label(run_dir: str | Path) -> str:
    """``<recipe>: <dir name>``, from summary.json or config.json when present."""
    run_dir = Path(run_dir)
    for name in ("summary.json", "config.json"):
        try:
            return f"{json.loads((run_dir / name).read_text())['recipe']}: {run_dir.name}"
        except (OSError, KeyError, json.JSONDecodeError):
            continue
    return run_dir.name


def plot_runs(run_dirs: Sequence[str | Path], out: str | Path, x: str = "frames",
              labels: Iterable[str] | None = None) -> Path:
    """Draw every panel of :data:`PANELS` that some run logged; returns the PNG's path.

    ``x`` is ``"frames"`` (env frames) or ``"time"`` (seconds of training).
    """
    if x not in ("frames", "time"):
        raise ValueError(f"x must be 'frames' or 'time', got {x!r}")
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt

    runs = [load_series(d) for d in run_dirs]
    labels = list(labels) if labels is not None else [run_label(d) for d in run_dirs]
    panels = [(k, title) for k, title in PANELS if any(k in r for r in runs)]
    if not panels:
        raise ValueError(f"no plottable metrics in {', '.join(map(str, run_dirs))}")
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    col = 0 if x == "frames" else 1
    for ax, (key, title) in zip(axes.flat, panels):
        for i, (series, label) in enumerate(zip(runs, labels)):
            if key in series:  # a run keeps its colour in every panel, even where others are missing
                pts = series[key]
                ax.plot([p[col] for p in pts], [p[2] for p in pts], color=f"C{i % 10}", label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("env frames" if x == "frames" else "seconds")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if len(runs) == 1:
        fig.suptitle(labels[0], fontsize=11)
    else:
        axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def plot_run_curves(run_dir: str | Path, recipe: str) -> None:
    """``curves.png`` beside a run's metrics; a plot that fails costs a warning line, never the run."""
    try:
        plot_runs([run_dir], Path(run_dir) / "curves.png")
    except Exception as e:  # noqa: BLE001  (matplotlib missing, no rows yet, a full disk...)
        print(f"[{recipe}] warning: curves.png not written: {e}", flush=True)
