"""Step timing without the profiler: warm-up, then synchronized repeated steps.

CUDA events on GPU (device time between the step's first and last launch, synchronized);
``time.perf_counter_ns`` around each step on CPU. The step is timed in a few windows, each on a fresh
copy of the model (``time_steps``): their medians' spread is the run-to-run noise ``advisor diff`` and
``advisor ready`` judge with. In each window samples are collected until both a minimum count and a
minimum time are reached (so a transient cannot dominate a fast model) and the median is known to within
MEDIAN_PRECISION (a noisy machine takes more samples), or until the maximum count or the budget runs out.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

import torch

from advisor.evidence import Timing
from advisor.machine.conditions import Watch, judge, wait_for_quiet
from advisor.stats import median_half_width, relative_spread
from advisor.workload.settling import SETTLING_SAMPLES, Settling, falling

MIN_SAMPLES_SLOW = 3
MEDIAN_PRECISION = 0.025  # half-width of the median's ~95% interval, over the median


WINDOWS = 3  # timing windows, each on a fresh copy of the model warmed up again: their spread is run-to-run noise


def time_steps(
    make_step: Callable[[], Callable[[], Any]],
    device: torch.device,
    warmup: int = 3,
    min_samples: int = 10,
    max_samples: int = 1000,
    min_time_s: float = 0.5,
    budget_s: float = 3.0,
    on_sample: Callable[[int], None] | None = None,
    windows: int = WINDOWS,
    copy_settled: Callable[[Callable[[], Any]], Callable[[], Any] | None] | None = None,
    timed: Callable[[Callable[[], Any]], float] | None = None,
) -> Timing:
    """Time the step in ``windows`` windows, each on a fresh step from ``make_step()`` (a fresh copy of the
    model and its inputs: new allocations, a new memory layout) warmed up again, the samples pooled. Two runs
    of the same code differ by more than the spread inside either (memory layout, caches, clocks); the
    windows' medians carry that between-run spread into the report (``Timing.run_noise``), at the cost of
    the extra warm-ups (``Timing.windows_cost_s``). A window starts only while the budget lasts: a slow step
    gets fewer windows, and one window says nothing of run-to-run noise.

    A first window whose steps still fall is a transient (workload/settling.py): it counts as warm-up and the
    same copy is timed again, for up to ``budget_s`` more, until a window's steps hold. The later windows then
    start from ``copy_settled(step)`` (the settled state in memory of its own) where it gives one: a fresh copy
    would start the transient again. ``timed``: how one call is timed, the device's timer unless given."""
    timer = "cuda-event" if device.type == "cuda" else "perf_counter"
    timed = timed or timer_for(device)
    per_window = max(4, math.ceil(min_samples / windows))
    samples: list[float] = []
    medians: list[float] = []
    extra_s = 0.0
    settle = Settling()

    def timed_window(step: Callable[[], Any], least: int) -> list[float]:  # at least ``least`` samples
        return _window(step, timed, least, max_samples // windows, min_time_s / windows, budget_s / windows,
                       len(samples), on_sample)

    with Watch() as watch:  # what else ran on these CPUs meanwhile: part of the evidence
        started = time.perf_counter()
        step = None
        for index in range(windows):
            if index and time.perf_counter() - started >= budget_s:
                break
            began = time.perf_counter()
            # the last window's copy is freed before the next is made: never two at once (a settled step's copy
            # is made from it)
            settled_copy = copy_settled(step) if settle.steps and copy_settled is not None and step else None
            step = None
            step = settled_copy or make_step()
            for _ in range(warmup):
                step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if index:
                extra_s += time.perf_counter() - began
            # the first window long enough to see a transient begin to fall (gpt_block: 99 ms for its first 5 steps)
            window = timed_window(step, per_window if index else max(per_window, SETTLING_SAMPLES))
            if not index:
                settling_began = time.perf_counter()
                while falling(window) and time.perf_counter() - settling_began < budget_s:
                    settle.took(window)
                    window = timed_window(step, per_window)
                settle.still_falling = bool(settle.steps) and falling(window)
                started += time.perf_counter() - settling_began  # the windows' budget starts once it holds
            samples += window
            medians.append(statistics.median(window))
    timing = Timing.of_samples(samples, timer, warmup)
    timing.conditions = watch.conditions
    timing.windows_ms = [round(m, 4) for m in medians]
    timing.windows_cost_s = round(extra_s, 3)
    timing.run_noise = relative_spread(medians)
    timing.settled_after = settle.steps
    timing.unsettled_ms = settle.first_ms
    timing.still_falling = settle.still_falling
    return timing


def _window(step: Callable[[], Any], timed: Callable[[Callable[[], Any]], float], min_samples: int,
            max_samples: int, min_time_s: float, budget_s: float, before: int,
            on_sample: Callable[[int], None] | None) -> list[float]:
    """One window's samples: until a minimum count and time and the window's median is known to within
    MEDIAN_PRECISION (pooled, the windows' median is known better), or the window's budget runs out."""
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < max(max_samples, min_samples):
        samples.append(timed(step))
        if on_sample is not None:
            on_sample(before + len(samples))
        elapsed = time.perf_counter() - started
        if len(samples) >= min_samples and elapsed >= min_time_s and (
                elapsed >= budget_s or median_half_width(samples) <= MEDIAN_PRECISION):
            break
        if len(samples) >= MIN_SAMPLES_SLOW and elapsed >= budget_s:
            break  # a slow step: a few samples within the budget beat a long wait
    return samples


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
