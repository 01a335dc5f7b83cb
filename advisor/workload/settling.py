"""A step that is still getting faster: its first steps are a transient, not the step the user's loop runs.

Some models run their first steps far slower than the rest, and not because of anything a warm-up of three steps
covers. samples/gpt_block.py (2 layers) takes 100 ms a step at first and 26 ms from its 20th step on: its
optimizer's running averages start as subnormal floats (tiny squared gradients), which the CPU computes on many
times slower, until they grow out of that range (``torch.set_flush_denormal(True)`` makes every step 26 ms). A
timing of its first steps said 99 ms, four times what the training loop runs at.

So a timing window whose steps fall is taken as warm-up, and the same copy of the model is timed again until a
window's steps no longer fall (``falling``). A window's halves differ by chance on a noisy machine; a fall is
counted only where the steps' order and their times go opposite ways (Spearman's rank correlation at most
TREND) and the later half's median is FALL below the earlier half's: on steps with 5% noise and no trend, 3% of
10-step windows pass both (the cost: one more window); gpt_block's first window gives -0.99 and 10%. Where no
window falls (nearly every model), nothing changes and nothing is added.
"""

from __future__ import annotations

from advisor.stats import median

FALL = 0.05  # the later half's median this far below the earlier half's
TREND = -0.5  # and the times' rank correlation with their order at most this
MIN_SAMPLES = 4
# The first timing window takes at least this many steps (within its time budget): a transient can start flat
# (gpt_block: 100, 99.6, 98.6, 95.2, 95.8, 91.7 ms) and a window of four steps on its plateau sees no fall
SETTLING_SAMPLES = 10


def falling(samples_ms: list[float]) -> bool:
    """Whether the step times fell across ``samples_ms`` (in the order they ran) by more than chance explains."""
    if len(samples_ms) < MIN_SAMPLES:
        return False
    half = len(samples_ms) // 2
    early, late = samples_ms[:half], samples_ms[-half:]
    return median(late) <= (1.0 - FALL) * median(early) and rank_correlation(samples_ms) <= TREND


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


class Settling:
    """What a timing took as warm-up while the steps fell: their count, the first such window's median, and whether
    they were still falling when its time ran out."""

    def __init__(self) -> None:
        self.steps = 0
        self.first_ms: float | None = None
        self.still_falling = False

    def took(self, window: list[float]) -> None:
        if self.first_ms is None:
            self.first_ms = round(median(window), 4)
        self.steps += len(window)
