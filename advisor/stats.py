"""Statistics, once: percentiles and bootstrap intervals for every measurement advisor reports.

Every interval is a percentile bootstrap with a fixed seed, so the same samples always give the same
report. Three shapes of question use it: one sample's statistic (a latency percentile), the median
of paired ratios (an A/B speedup), and the ratio of one statistic between two independent sets of
samples (two runs compared by ``advisor diff``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

if TYPE_CHECKING:
    import random

RESAMPLES = 2000
CONFIDENCE = 0.95


def median(values: Iterable[float]) -> float:
    """The median, as ``statistics.median`` computes it. Here, and ``fmean`` below, because the statistics module
    imports fractions, decimal and random: 1 MB of a 29 MB ``advisor analyze``, which needs only these two."""
    ordered = sorted(values)
    count = len(ordered)
    if not count:
        raise ValueError("no median of no values")
    middle = count // 2
    return ordered[middle] if count % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def fmean(values: Iterable[float]) -> float:
    """The mean, as ``statistics.fmean`` computes it (an exactly rounded sum over the count)."""
    values = values if isinstance(values, Sequence) else list(values)
    if not values:
        raise ValueError("no mean of no values")
    return math.fsum(values) / len(values)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between the closest ranks (numpy's default)."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median_half_width(samples: Sequence[float]) -> float:
    """The median's ~95% interval half-width over the median (1.57 IQR / sqrt(n), McGill et al.)."""
    if len(samples) < 4:
        return float("inf")
    middle = median(samples)
    return median_uncertainty(samples) / middle if middle > 0 else float("inf")


def median_uncertainty(samples: Sequence[float]) -> float:
    """The median's ~95% interval half-width in the samples' unit (1.57 IQR / sqrt(n)), for a median that may
    lie near zero or below it (a lateness); fewer than four samples have no quartiles, so their whole range."""
    if len(samples) < 4:
        return max(samples) - min(samples) if samples else 0.0
    return 1.57 * (percentile(samples, 75) - percentile(samples, 25)) / len(samples) ** 0.5


def bootstrap(estimate: Callable[[random.Random], float], resamples: int = RESAMPLES,
              confidence: float = CONFIDENCE, seed: int = 0) -> tuple[float, float]:
    """The ``confidence`` interval of ``estimate(rng)``, a statistic of one resampling drawn with ``rng``."""
    import random

    rng = random.Random(seed)
    estimates = sorted(estimate(rng) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return estimates[int(tail * resamples)], estimates[int((1 - tail) * resamples) - 1]


def statistic_interval(samples: Sequence[float], statistic: Callable[[Sequence[float]], float],
                       resamples: int = RESAMPLES) -> tuple[float, float]:
    """The interval of ``statistic`` over one set of samples (a percentile of the calls timed)."""
    return bootstrap(lambda rng: statistic(rng.choices(samples, k=len(samples))), resamples)


def median_interval(values: Sequence[float], resamples: int = RESAMPLES) -> tuple[float, float]:
    """The interval of the median of ``values`` (paired ratios of an A/B comparison)."""
    return statistic_interval(values, median, resamples)


def ratio_interval(old: Sequence[float], new: Sequence[float],
                   statistic: Callable[[Sequence[float]], float] = median,
                   resamples: int = RESAMPLES) -> tuple[float, float]:
    """The interval of statistic(new) / statistic(old), each set resampled on its own (two independent runs)."""
    return bootstrap(lambda rng: statistic(rng.choices(new, k=len(new))) /
                     max(statistic(rng.choices(old, k=len(old))), 1e-12), resamples)


# Student's t at 97.5% by degrees of freedom: a 95% two-sided interval from few samples.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t_quantile(freedom: int) -> float:
    """t at 97.5% with ``freedom`` degrees of freedom (past the table, within 0.002 of the exact value)."""
    return _T975[freedom - 1] if freedom <= len(_T975) else 1.96 + 2.4 / freedom


def ratio_median_interval(ratios: Sequence[float], resamples: int = RESAMPLES) -> tuple[float, float]:
    """The 95% interval of paired ratios (an A/B speedup): the wider of the median's bootstrap interval and
    Student's t interval of the mean log-ratio. A bootstrap never reaches past the samples' own range, so
    from three pairs it claims a precision they do not have; the t interval widens with fewer pairs. Fewer
    than two ratios carry no interval at all: (0, inf)."""
    if len(ratios) < 2 or min(ratios) <= 0:
        return 0.0, float("inf")
    low, high = median_interval(ratios, resamples)
    import statistics

    logs = [math.log(r) for r in ratios]
    half = t_quantile(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    centre = fmean(logs)
    return min(low, math.exp(centre - half)), max(high, math.exp(centre + half))


def rank_correlation(samples: list[float]) -> float:
    """Spearman's correlation of ``samples`` with their order (ties share their mean rank); 0 for constant ones."""
    ranks = _ranks(samples)
    count = len(samples)
    mean = (count - 1) / 2
    covariance = sum((index - mean) * (rank - mean) for index, rank in enumerate(ranks))
    spread = (sum((index - mean) ** 2 for index in range(count)) * sum((rank - mean) ** 2 for rank in ranks)) ** 0.5
    return covariance / spread if spread else 0.0


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2
        start = end + 1
    return ranks


def relative_spread(values: Sequence[float]) -> float | None:
    """Standard deviation over mean: how much independent windows (or runs) of the same code differ.
    None from fewer than two values."""
    if len(values) < 2:
        return None
    import statistics

    mean = fmean(values)
    return round(statistics.stdev(values) / mean, 5) if mean > 0 else None


def run_to_run_half_width(sides: Sequence[tuple[float, int]]) -> float:
    """The 95% half-width, relative, that run-to-run noise adds: Student's t over the windows' degrees of
    freedom times the sides' relative spreads combined. ``sides``: (spread, windows) of each run (one side
    for one run's value against a fixed budget, two for a ratio of two runs)."""
    freedom = max(1, sum(windows - 1 for _, windows in sides))
    return t_quantile(freedom) * math.hypot(*(spread for spread, _ in sides))


def widened(value: float, low: float, high: float, half_width: float) -> tuple[float, float]:
    """The interval (low, high) around ``value`` widened by a further relative ``half_width`` of independent
    noise, combined in log space (both are relative errors of a positive quantity)."""
    if half_width <= 0 or value <= 0:
        return low, high
    centre = math.log(value)
    inside = max(centre - math.log(max(low, 1e-12)), math.log(max(high, 1e-12)) - centre)
    half = math.hypot(inside, math.log1p(half_width))
    return math.exp(centre - half), math.exp(centre + half)


def settling_note(timing) -> str:
    """What the timing took as warm-up because the step was still getting faster (workload/settling.py), as the
    reports state it; empty when it took none."""
    if not getattr(timing, "settled_after", 0):
        return ""
    said = f"timed after {timing.settled_after} more steps that were still getting faster"
    if timing.unsettled_ms is not None:
        said += f" (median {timing.unsettled_ms:.3g} ms)"
    return said + ("; still getting faster when its time ran out" if timing.still_falling else "")


def run_noise_said(measured) -> str:
    """``measured``'s run-to-run noise as every report states it (a Timing, or a readiness LatencyRow: its
    windows' medians ``windows_ms`` and their spread ``run_noise``); empty when it measured none."""
    if getattr(measured, "run_noise", None) is None:
        return ""
    return f"run-to-run ±{measured.run_noise:.1%} over {len(measured.windows_ms)} windows"
