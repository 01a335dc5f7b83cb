"""Statistics, once: percentiles and bootstrap intervals for every measurement advisor reports.

Every interval is a percentile bootstrap with a fixed seed, so the same samples always give the same
report. Three shapes of question use it: one sample's statistic (a latency percentile), the median
of paired ratios (an A/B speedup), and the ratio of one statistic between two independent sets of
samples (two runs compared by ``advisor diff``).
"""

from __future__ import annotations

import random
import statistics
from typing import Callable, Sequence

RESAMPLES = 2000
CONFIDENCE = 0.95


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
    median = statistics.median(samples)
    spread = percentile(samples, 75) - percentile(samples, 25)
    return 1.57 * spread / len(samples) ** 0.5 / median if median > 0 else float("inf")


def bootstrap(estimate: Callable[[random.Random], float], resamples: int = RESAMPLES,
              confidence: float = CONFIDENCE, seed: int = 0) -> tuple[float, float]:
    """The ``confidence`` interval of ``estimate(rng)``, a statistic of one resampling drawn with ``rng``."""
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
    return statistic_interval(values, statistics.median, resamples)


def ratio_interval(old: Sequence[float], new: Sequence[float],
                   statistic: Callable[[Sequence[float]], float] = statistics.median,
                   resamples: int = RESAMPLES) -> tuple[float, float]:
    """The interval of statistic(new) / statistic(old), each set resampled on its own (two independent runs)."""
    return bootstrap(lambda rng: statistic(rng.choices(new, k=len(new))) /
                     max(statistic(rng.choices(old, k=len(old))), 1e-12), resamples)
