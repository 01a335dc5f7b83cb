"""The A/B result of two whole steps and its verdict: a bootstrap interval on the speedup.

Each pair of timed calls (``verify/interleave.py`` takes them) gives a ratio baseline/candidate;
the speedup is the median ratio and its 95% interval comes from resampling the pairs (bootstrap
of the median). Pure arithmetic: ``advisor run``'s parent judges its runs with it without torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from advisor.machine.state import MeasurementConditions
from advisor.stats import ratio_median_interval


@dataclass
class ABResult:
    baseline_ms: list[float]
    candidate_ms: list[float]
    conditions: MeasurementConditions | None = None
    settled_pairs: int = 0  # pairs let go first while a side's steps still got faster (verify/interleave.py)

    @property
    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.baseline_ms, self.candidate_ms) if b > 0]

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    def interval(self) -> tuple[float, float]:
        """The 95% interval of the median speedup (``stats.ratio_median_interval``)."""
        return ratio_median_interval(self.ratios)


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


def smallest_resolvable(speedup_interval: tuple[float, float]) -> float | None:
    """The power of these pairs: the smallest speedup (or, inverted, slowdown) an interval this wide would
    have called verified (slower): beyond 1 by MIN_EFFECT at its low end, and no wider than the effect."""
    low, high = speedup_interval
    if low <= 0 or high <= 0:
        return None
    return round((1.0 + MIN_EFFECT) * math.sqrt(high / low), 4)


def resolution_note(speedup_interval: tuple[float, float]) -> str:
    resolves = smallest_resolvable(speedup_interval)
    return "" if resolves is None else f"these pairs resolve a change of {resolves:.2f}x or more either way"


def why_inconclusive(speedup: float, speedup_interval: tuple[float, float]) -> str:
    low, high = speedup_interval
    return (f"the interval [{low:.2f}-{high:.2f}] is too wide to call {speedup:.2f}x a gain, a loss or no change "
            f"(a verdict needs it no wider than the effect, or within {NO_GAIN_BAND:.0%} of 1 for no gain): "
            "more pairs (--pairs, --budget) or a quieter machine")
