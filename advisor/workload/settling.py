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

from advisor.stats import median, rank_correlation

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
