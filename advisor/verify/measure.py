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

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from advisor.stats import median_interval
from advisor.workload.timing import timer_for


@dataclass
class ABResult:
    baseline_ms: list[float]
    candidate_ms: list[float]

    @property
    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.baseline_ms, self.candidate_ms) if b > 0]

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    def interval(self) -> tuple[float, float]:
        """The 95% bootstrap interval of the median speedup."""
        return median_interval(self.ratios)


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
    return result


MIN_EFFECT = 0.01  # a change within 1% of the baseline is no change, however tight its interval


def verdict(speedup_interval: tuple[float, float]) -> str:
    """verified / slower when the whole 95% interval lies beyond 1 by at least MIN_EFFECT.

    Without the margin, thousands of tight samples turn a 0.5% difference into a "slower 1.00x"
    verdict, which no user can act on.
    """
    low, high = speedup_interval
    if low > 1.0 + MIN_EFFECT:
        return "verified"
    if high < 1.0 - MIN_EFFECT:
        return "slower"
    return "no-gain"
