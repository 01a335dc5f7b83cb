"""A memory fix measured: the peak of baseline and candidate over the same steps, alternately, and its verdict.

A fix for a step near its device's capacity (activation checkpointing, reduced precision) is for memory, and
usually costs time: its verification measures what it is for. Each side's peak (``workload/peak_memory.py``: what
the step starts with plus the most its allocations rise, by the allocator's own count) over MEMORY_STEPS warmed
steps, the sides alternating; the time it costs comes from the interleaved pairs every fix is timed with
(``verify/copies.py``), and is reported beside the peaks, never as a gain.

Verdict: *verified* when the candidate's highest peak is at least MIN_MEMORY_EFFECT below the baseline's; *no-gain*
when it is not; *inconclusive* when one side's steps disagree by more than STEADY (an allocation that comes and
goes between steps: one more step would not say which peak is the step's).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from advisor.workload.peak_memory import step_peak

MEMORY_STEPS = 2
MIN_MEMORY_EFFECT = 0.05  # a peak within 5% of the baseline's leaves the step as near its capacity as it was
STEADY = 0.02  # the peaks of one side's steps agree within this


def peaks_alternately(baseline: Callable[[], Any], candidate: Callable[[], Any], device: torch.device,
                      steps: int = MEMORY_STEPS) -> tuple[list[int], list[int]]:
    """Each side's peak, step by step, the sides alternating (A B, B A, ...). Raises
    ``peak_memory.PeakUnmeasurable`` where the allocator's count cannot be read."""
    base: list[int] = []
    cand: list[int] = []
    for index in range(steps):
        order = ((baseline, base), (candidate, cand)) if index % 2 == 0 else ((candidate, cand), (baseline, base))
        for step, peaks in order:
            peaks.append(step_peak(step, device))
    return base, cand


def spread(peaks: list[int]) -> float:
    return (max(peaks) - min(peaks)) / max(peaks) if peaks and max(peaks) > 0 else 0.0


def memory_verdict(baseline: list[int], candidate: list[int]) -> tuple[str, str]:
    """(status, why) for the candidate's peaks against the baseline's."""
    unsteady = max(spread(baseline), spread(candidate))
    if unsteady > STEADY:
        return "inconclusive", (f"one side's peaks differ by {unsteady:.0%} from step to step, so neither step's is "
                                "the step's peak")
    ratio = max(candidate) / max(baseline) if max(baseline, default=0) > 0 else 1.0
    if ratio <= 1 - MIN_MEMORY_EFFECT:
        return "verified", f"the fix lowers the step's peak by {1 - ratio:.0%}"
    if ratio < 1:
        return "no-gain", (f"the fix lowers the step's peak by only {1 - ratio:.1%} (less than "
                           f"{MIN_MEMORY_EFFECT:.0%}): the step stays as near its capacity")
    return "no-gain", f"the fix does not lower the step's peak ({ratio:.2f}x the baseline's)"
