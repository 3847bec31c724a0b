"""Statistics for learning judged over seeds (Agarwal et al., 2021, "Deep RL at the Edge of the
Statistical Precipice"): the interquartile mean with a bootstrap confidence interval, and the
median with its interquartile range.

Pure functions of plain lists; ``inf`` stands for "never reached" in times to target, so a median
over seeds where most runs failed comes out ``inf`` rather than a flattering figure.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Sequence


def quantile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` with linear interpolation (numpy's default); ``inf`` allowed."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi or s[lo] == s[hi]:
        return s[lo]
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median_iqr(xs: Sequence[float]) -> tuple[float, float, float]:
    """``(median, 25th percentile, 75th percentile)``."""
    return quantile(xs, 0.5), quantile(xs, 0.25), quantile(xs, 0.75)


def iqm(xs: Sequence[float]) -> float:
    """Interquartile mean: the mean of the middle half, ``floor(n/4)`` values cut from each end
    (scipy's ``trim_mean(x, 0.25)``, as rliable computes it)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    cut = len(s) // 4
    middle = s[cut : len(s) - cut]
    return sum(middle) / len(middle)


def bootstrap_ci(
    xs: Sequence[float],
    stat: Callable[[Sequence[float]], float] = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over runs: resample the runs with replacement
    ``reps`` times and take the central ``confidence`` of the statistic's values."""
    if not xs:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    n = len(xs)
    values = [stat([xs[rng.randrange(n)] for _ in range(n)]) for _ in range(reps)]
    tail = (1 - confidence) / 2
    return quantile(values, tail), quantile(values, 1 - tail)
