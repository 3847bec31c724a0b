"""Learning curves from run directories, one PNG: return, throughput and policy lag side by side.

Every run writes ``metrics.jsonl`` (one JSON row per progress report: ``step`` = env frames,
``time``, then ``role/metric`` values) and ``summary.json``. :func:`plot_runs` draws any number of
runs on shared axes so recipes can be compared at a glance; the learner also calls it at the end
of a run that logs (``curves.png`` in the run directory). W&B shows the same series once an
offline run is synced; this needs no account and no network. ``distrl compare`` draws its
figures with :func:`plot_metric`, :func:`plot_bars` and :func:`plot_histograms`.

    distrl plot RUN_DIR [RUN_DIR ...] [--out curves.png] [--x time]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from distrl.runtime.job import open_private

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


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, out: str | Path) -> Path:
    """Lays ``fig`` out, writes it to ``out`` (PNG unless the suffix says otherwise) and closes it."""
    out = Path(out)
    fig.tight_layout()
    with open_private(out, "wb") as f:  # a symlink planted as the figure is refused, not written through
        fig.savefig(f, dpi=90, format=out.suffix[1:] or "png")
    _pyplot().close(fig)
    return out


def panels(n: int, width: float = 4.5, height: float = 3.4):
    """``(fig, axes)``: ``n`` panels side by side, ``axes`` a list (one panel or many alike)."""
    fig, axes = _pyplot().subplots(1, n, figsize=(width * n, height), squeeze=False)
    return fig, list(axes[0])


def style_panel(ax, title: str, xlabel: str) -> None:
    """A panel of learning curves as every distrl figure has it: title, x label, grid, legend."""
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


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


def plot_runs(
    run_dirs: Sequence[str | Path], out: str | Path, x: str = "frames", labels: Iterable[str] | None = None
) -> Path:
    """Draw every panel of :data:`PANELS` that some run logged; returns the PNG's path.

    ``x`` is ``"frames"`` (env frames) or ``"time"`` (seconds of training).
    """
    if x not in ("frames", "time"):
        raise ValueError(f"x must be 'frames' or 'time', got {x!r}")
    plt = _pyplot()
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
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    if len(runs) == 1:
        fig.suptitle(labels[0], fontsize=11)
    else:
        axes.flat[0].legend(fontsize=8)
    return save_figure(fig, out)


def plot_metric(
    groups: Mapping[str, Sequence[str | Path]],
    key: str,
    out: str | Path,
    x: str = "time",
    title: Optional[str] = None,
    log_x: bool = False,
) -> Path:
    """One panel: ``key`` of every run, a colour per group (a recipe), one line per run (a seed).

    ``groups`` maps a label to its run directories; runs without ``metrics.jsonl`` or without the
    key are left out; ``ValueError`` when no run has it."""
    if x not in ("frames", "time"):
        raise ValueError(f"x must be 'frames' or 'time', got {x!r}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    col, drawn = (0 if x == "frames" else 1), 0
    for i, (label, runs) in enumerate(groups.items()):
        for j, run in enumerate(runs):
            pts = load_series(run).get(key, []) if (Path(run) / "metrics.jsonl").is_file() else []
            if pts:
                ax.plot(
                    [p[col] for p in pts],
                    [p[2] for p in pts],
                    color=f"C{i % 10}",
                    alpha=0.9 if j == 0 else 0.5,
                    label=label if j == 0 else None,
                )
                drawn += 1
    if not drawn:
        plt.close(fig)
        raise ValueError(f"no run logged {key}")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel("env frames" if x == "frames" else "seconds of training")
    ax.set_ylabel(key)
    ax.set_title(title or key, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, out)


def plot_bars(
    values: Mapping[str, Optional[float]], out: str | Path, ylabel: str, title: str, log_y: bool = False
) -> Path:
    """One bar per label, its value written over it; a ``None`` value is an empty slot marked n/a."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(values) + 2), 4.0))
    labels = list(values)
    heights = [values[k] or 0.0 for k in labels]
    bars = ax.bar(labels, heights, color=[f"C{i % 10}" for i in range(len(labels))])
    for bar, label in zip(bars, labels):
        v = values[label]
        ax.annotate(
            "n/a" if v is None else f"{v:,.0f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    if log_y and any(h > 0 for h in heights):  # from the decade below the smallest bar, so every bar shows
        ax.set_yscale("log")
        ax.set_ylim(10 ** math.floor(math.log10(min(h for h in heights if h > 0))) / 2, max(heights) * 2)
    else:
        ax.margins(y=0.1)  # room for the values over the bars
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="x", labelrotation=20)
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, out)


def plot_histograms(hists: Mapping[str, Mapping[int, int]], out: str | Path, xlabel: str, title: str) -> Path:
    """One small panel per label: the share of samples at each integer value (policy lag in
    learner updates); a label with an empty histogram says so."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    cols = min(4, max(len(hists), 1))
    rows = -(-max(len(hists), 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    for i, (ax, (label, hist)) in enumerate(zip(axes.flat, hists.items())):
        total = sum(hist.values())
        if total:
            xs = sorted(hist)
            ax.bar(xs, [hist[k] / total for k in xs], color=f"C{i % 10}", width=0.8)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        else:
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    for ax in list(axes.flat)[len(hists) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, out)


def plot_run_curves(run_dir: str | Path, recipe: str) -> None:
    """``curves.png`` beside a run's metrics; a plot that fails costs a warning line, never the run."""
    try:
        plot_runs([run_dir], Path(run_dir) / "curves.png")
    except Exception as e:  # noqa: BLE001  (matplotlib missing, no rows yet, a full disk...)
        print(f"[{recipe}] warning: curves.png not written: {e}", flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    """``distrl plot`` (and ``launch/plot.py``); bad input is one line on stderr and exit status 2."""
    from distrl.runtime.args import OneLineParser

    p = OneLineParser(
        prog="distrl plot",
        description=(
            "Plot learning curves of one or more runs side by side: return, throughput, policy lag, loss.\n\n"
            "    distrl plot runs/impala-... runs/seed-... --out compare.png --x time\n\n"
            "Reads each run directory's metrics.jsonl."
        ),
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (each with a metrics.jsonl)")
    p.add_argument("--out", default="curves.png", help="PNG to write")
    p.add_argument("--x", choices=("frames", "time"), default="frames", help="x axis: env frames or seconds")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    missing = [d for d in args.run_dirs if not (Path(d) / "metrics.jsonl").is_file()]
    if missing:
        print(f"error: no metrics.jsonl in {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        out = plot_runs(args.run_dirs, args.out, x=args.x)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0
