"""Interleaved timing of two whole steps: baseline and candidate alternate (A B, then B A, ...)
so drift of the machine hits both; ``verify/measure.py`` judges the pairs.

A model that fits in the CPU caches runs warm in real use, call after call; strict
alternation would evict each side's weights before every timed call and understate the gain
(measured: 1.2x reported against 2.5x from a standard harness). So for fast steps each
timed call is preceded by one untimed call of the same side.

Each side runs on a fresh copy, so a model whose first steps are a transient (workload/settling.py) runs it on
both: once the first ``min_pairs`` pairs are in, pairs in which either side's steps still fell are let go and
counted (``ABResult.settled_pairs``), up to SETTLING_ROUNDS times, and the pairs kept start after them.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from advisor.machine.conditions import Watch
from advisor.verify.measure import ABResult
from advisor.workload.settling import falling
from advisor.workload.timing import timer_for

WARM_CALL_BELOW_MS = 50.0  # slower steps stream their data anyway: no warm-up call needed
SETTLING_ROUNDS = 5  # times the first pairs may be let go while a side's steps still fall


def interleave(
    baseline: Callable[[], Any],
    candidate: Callable[[], Any],
    device: torch.device,
    budget_s: float,
    min_pairs: int = 10,
    max_pairs: int = 300,
    timed: Callable[[Callable[[], Any]], float] | None = None,
) -> ABResult:
    """Pairs until ``budget_s`` (at least ``min_pairs``, at most ``max_pairs``); ``timed``: how one call is timed,
    the device's timer unless given."""
    timed = timed or timer_for(device)
    first = max(timed(baseline), timed(candidate))
    warm = first < WARM_CALL_BELOW_MS

    def measure(side: Callable[[], Any]) -> float:
        if warm:
            side()
        return timed(side)

    result = ABResult([], [])
    rounds = 0
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
            if _settling(result, min_pairs, rounds):  # a transient on either side: these pairs were warm-up
                rounds += 1
                result.settled_pairs += len(result.baseline_ms)
                result.baseline_ms, result.candidate_ms = [], []
                started = time.perf_counter()
                continue
            if len(result.baseline_ms) >= min_pairs and time.perf_counter() - started >= budget_s:
                break
    result.conditions = watch.conditions
    return result


def _settling(result: ABResult, min_pairs: int, rounds: int) -> bool:
    """The first ``min_pairs`` pairs are in and either side's steps fell across them."""
    return (rounds < SETTLING_ROUNDS and len(result.baseline_ms) == min_pairs
            and (falling(result.baseline_ms) or falling(result.candidate_ms)))
