"""Step timing without the profiler: warm-up, then synchronized repeated steps.

CUDA events on GPU (device time between the step's first and last launch, synchronized);
``time.perf_counter_ns`` around each step on CPU. Samples are collected until both a minimum
count and a minimum time are reached (so a transient cannot dominate a fast model) and the
median is known to within MEDIAN_PRECISION (a noisy machine takes more samples, so two runs
compare: see ``advisor diff``), or until the maximum count or the time budget runs out.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from advisor.conditions import Watch, judge, wait_for_quiet
from advisor.evidence import Timing
from advisor.stats import median_half_width

MIN_SAMPLES_SLOW = 3
MEDIAN_PRECISION = 0.025  # half-width of the median's ~95% interval, over the median


def time_steps(
    step: Callable[[], Any],
    device: torch.device,
    warmup: int = 3,
    min_samples: int = 10,
    max_samples: int = 1000,
    min_time_s: float = 0.5,
    budget_s: float = 3.0,
    on_sample: Callable[[int], None] | None = None,
) -> Timing:
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timer = "cuda-event" if device.type == "cuda" else "perf_counter"
    timed = timer_for(device)

    def measure() -> float:
        return timed(step)
    samples: list[float] = []
    with Watch() as watch:  # what else ran on these CPUs meanwhile: part of the evidence
        started = time.perf_counter()
        while len(samples) < max_samples:
            samples.append(measure())
            if on_sample is not None:
                on_sample(len(samples))
            elapsed = time.perf_counter() - started
            if len(samples) >= min_samples and elapsed >= min_time_s and (
                    elapsed >= budget_s or median_half_width(samples) <= MEDIAN_PRECISION):
                break
            if len(samples) >= MIN_SAMPLES_SLOW and elapsed >= budget_s:
                break  # a slow step: a few samples within the budget beat a long wait
    timing = Timing.of_samples(samples, timer, warmup)
    timing.conditions = watch.conditions
    return timing


def timer_for(device: torch.device) -> Callable[[Callable[[], Any]], float]:
    """Milliseconds of one synchronized call: CUDA events on GPU, perf_counter on CPU."""
    if device.type == "cuda":
        def cuda_time(fn: Callable[[], Any]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            return start.elapsed_time(end)
        return cuda_time

    def host_time(fn: Callable[[], Any]) -> float:
        begin = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - begin) / 1e6
    return host_time


def timed_when_quiet(time_once: Callable[[], Timing], wait_s: float,
                     progress: Callable[[str], None] = lambda text: None) -> Timing:
    """``time_once()``; when another job held the CPUs meanwhile, wait up to ``wait_s`` for the machine to be
    quiet and time the steps again: a share of a step another job stretched is not the model's. The timing
    kept says what was seen (``remeasured``); one still contended is marked unreliable by the report."""
    timing = time_once()
    busy = judge(timing.conditions)
    if not busy or wait_s <= 0:
        return timing
    progress(f"the steps ran while {'; '.join(busy)}: waiting up to {wait_s:g} s for the machine to be quiet")
    waited = wait_for_quiet(wait_s)
    if waited is None:
        timing.remeasured = (f"waited {wait_s:g} s for the contention to pass (first timing: {'; '.join(busy)}); "
                             "it did not")
        return timing
    again = time_once()
    still = judge(again.conditions)
    again.remeasured = (f"timed again after the machine was quiet for a moment ({waited:g} s after the first "
                        f"timing, which ran while {'; '.join(busy)})"
                        + (f"; the second timing ran while {'; '.join(still)}" if still else ""))
    return again
