"""``distrl compare``'s pictures: return against wall time and against frames, fps bars, policy lag
histograms, one PNG each beside ``compare.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

#: the training return every comparison reads (the mean of the last 100 episodes)
RETURN_KEY = "actor/return_mean_100"


def write_plots(out: Path, rows: Sequence[dict[str, Any]]) -> list[Path]:
    """Return against wall time and against frames, fps bars, lag histograms: the PNGs written."""
    from distrl.logging.plots import plot_bars, plot_histograms, plot_metric

    ran = [r for r in rows if r["status"] != "skipped" and any(x["finished"] for x in r["runs"])]
    groups = {r["recipe"]: [x["run_dir"] for x in r["runs"] if x["finished"]] for r in ran}
    written = []
    for name, x, log_x in (("return_vs_time.png", "time", False), ("return_vs_frames.png", "frames", True)):
        try:
            written.append(
                plot_metric(
                    groups,
                    RETURN_KEY,
                    out / name,
                    x=x,
                    log_x=log_x,
                    title="training return (mean of the last 100 episodes)",
                )
            )
        except ValueError:  # no run logged a return yet: nothing to draw
            continue
    if ran:
        written.append(
            plot_bars(
                {r["recipe"]: r["fps"] for r in ran},
                out / "fps.png",
                "env steps / s",
                "throughput (median over seeds)",
                log_y=True,
            )
        )
        written.append(
            plot_histograms(
                {r["recipe"]: r["policy_lag_hist"] for r in ran},
                out / "policy_lag.png",
                "policy lag (learner updates)",
                "policy lag: share of samples",
            )
        )
    return written
