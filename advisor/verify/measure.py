"""Interleaved A/B timing of two whole steps, with a bootstrap interval on the speedup.

Baseline and candidate alternate (A B, then B A, ...) so drift of the machine hits both;
each pair gives a ratio baseline/candidate; the speedup is the median ratio and its 95%
interval comes from resampling the pairs (bootstrap of the median).

A model that fits in the CPU caches runs warm in real use, call after call; strict
alternation would evict each side's weights before every timed call and understate the gain
(measured: 1.2x reported against 2.5x from a standard harness). So for fast steps each
timed call is preceded by one untimed call of the same side.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from advisor.conditions import Watch
from advisor.machine_state import MeasurementConditions
from advisor.stats import ratio_median_interval
from advisor.workload.timing import timer_for


@dataclass
class ABResult:
    baseline_ms: list[float]
    candidate_ms: list[float]
    conditions: MeasurementConditions | None = None

    @property
    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.baseline_ms, self.candidate_ms) if b > 0]

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    def interval(self) -> tuple[float, float]:
        """The 95% interval of the median speedup (``stats.ratio_median_interval``)."""
        return ratio_median_interval(self.ratios)


WARM_CALL_BELOW_MS = 50.0  # slower steps stream their data anyway: no warm-up call needed


def interleave(
    baseline: Callable[[], Any],
    candidate: Callable[[], Any],
    device: torch.device,
    budget_s: float,
    min_pairs: int = 10,
    max_pairs: int = 300,
) -> ABResult:
    timed = timer_for(device)
    first = max(timed(baseline), timed(candidate))
    warm = first < WARM_CALL_BELOW_MS

    def measure(side: Callable[[], Any]) -> float:
        if warm:
            side()
        return timed(side)

    result = ABResult([], [])
    with Watch(readable=True) as watch:
        started = time.perf_counter()
        while len(result.baseline_ms) < max_pairs:
            if len(result.baseline_ms) % 2 == 0:
                a = measure(baseline)
                b = measure(candidate)
            else:
                b = measure(candidate)
                a = measure(baseline)
            result.baseline_ms.append(a)
            result.candidate_ms.append(b)
            if len(result.baseline_ms) >= min_pairs and time.perf_counter() - started >= budget_s:
                break
    result.conditions = watch.conditions
    return result


MIN_EFFECT = 0.01  # a change within 1% of the baseline is no change, however tight its interval
# A verdict needs an interval narrow enough to carry it. verified / slower: the interval's half-width
# (in log-ratio) at most the effect itself, so "2.13x [1.27-13.99]" (a half-width of 1.2 against an
# effect of 0.76) decides nothing. no-gain: the whole interval within NO_GAIN_BAND of 1 either way, so
# "0.86x [0.28-1.79]", which allows a 3.5x loss or a 1.8x gain, demotes nothing.
MOST_HALF_WIDTH_TO_EFFECT = 1.0
NO_GAIN_BAND = 0.10


def verdict(speedup: float, speedup_interval: tuple[float, float]) -> str:
    """verified / slower when the whole 95% interval lies beyond 1 by at least MIN_EFFECT and is no wider
    than the effect; no-gain when it lies within NO_GAIN_BAND of 1; else inconclusive.

    Without the margin, thousands of tight samples turn a 0.5% difference into a "slower 1.00x"
    verdict, which no user can act on; without the width bound, three noisy pairs on a busy machine
    turn into "verified" or "no-gain".
    """
    low, high = speedup_interval
    if low <= 0 or high <= 0 or speedup <= 0:
        return "inconclusive"
    half_width = math.log(high / low) / 2
    precise = half_width <= MOST_HALF_WIDTH_TO_EFFECT * abs(math.log(speedup))
    if low > 1.0 + MIN_EFFECT:
        return "verified" if precise else "inconclusive"
    if high < 1.0 - MIN_EFFECT:
        return "slower" if precise else "inconclusive"
    if high <= 1.0 + NO_GAIN_BAND and low >= 1.0 / (1.0 + NO_GAIN_BAND):
        return "no-gain"
    return "inconclusive"


def why_inconclusive(speedup: float, speedup_interval: tuple[float, float]) -> str:
    low, high = speedup_interval
    return (f"the interval [{low:.2f}-{high:.2f}] is too wide to call {speedup:.2f}x a gain, a loss or no change "
            f"(a verdict needs it no wider than the effect, or within {NO_GAIN_BAND:.0%} of 1 for no gain): "
            "more pairs (--pairs, --budget) or a quieter machine")
