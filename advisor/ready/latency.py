"""Latency percentiles and peak memory per batch size, and the memory the device has.

Warm-up calls are excluded; each call is timed alone (CUDA events on GPU, perf_counter_ns on
CPU) under torch.inference_mode(). At least MIN_SAMPLES calls (or the time budget) per batch
size, up to TARGET_SAMPLES for a p99 worth the name, in WINDOWS windows, each on a fresh batch
warmed up again: the windows' p50s differ as two runs would (the run-to-run noise). Each
percentile gets a bootstrap interval widened by that noise, so a budget within it is borderline;
a p99 from fewer than P99_SAMPLES calls is flagged as an estimate.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from advisor.machine import procfs
from advisor.machine.conditions import Watch
from advisor.ready.measured import MemoryBudget
from advisor.ready.places import first_line, raised_at
from advisor.report.readiness import LatencyRow, Percentile
from advisor.stats import percentile, relative_spread, run_to_run_half_width, statistic_interval, widened
from advisor.workload.target import call_model
from advisor.workload.timing import timer_for

WARMUP_CALLS = 5
MIN_SAMPLES = 50
TARGET_SAMPLES = 300
P99_SAMPLES = 100  # below this the top 1% is one call or none: an estimate
WINDOWS = 3  # each on a fresh batch warmed up again: their p50s' spread is the run-to-run noise


def measure_latency(model: torch.nn.Module, batch_of: Callable[[int], Any], sizes: list[int],
                    device: torch.device, model_file: str, seconds_per_size: float = 2.0) -> list[LatencyRow]:
    timer = timer_for(device)
    rows = []
    for size in sizes:
        row = LatencyRow(batch_size=size)
        rows.append(row)
        try:
            peak = PeakMemory(device)
            windows = []
            with torch.inference_mode(), Watch() as watch:
                for _ in range(WINDOWS):
                    inputs = batch_of(size)  # a fresh batch: new allocations, as another run's would be
                    for _ in range(WARMUP_CALLS):
                        call_model(model, inputs)
                    windows.append(_timed(lambda inputs=inputs: call_model(model, inputs), timer,
                                          seconds_per_size / WINDOWS))
            row.conditions = watch.conditions
            row.peak_memory_mb = peak.read_mb()
        except Exception as failure:  # noqa: BLE001 - this batch size fails: the check says where
            row.error = f"{type(failure).__name__}: {first_line(failure)}"
            row.error_location = raised_at(failure, model_file)
            continue
        _fill(row, windows)
    return rows


def _timed(call: Callable[[], Any], timer: Callable[[Callable[[], Any]], float], seconds: float) -> list[float]:
    samples: list[float] = []
    began = time.monotonic()
    while len(samples) < MIN_SAMPLES / WINDOWS or (len(samples) < TARGET_SAMPLES / WINDOWS
                                                   and time.monotonic() - began < seconds):
        samples.append(timer(call))
    return samples


def _fill(row: LatencyRow, windows: list[list[float]]) -> None:
    """The row's percentiles from its windows' pooled calls, each interval widened by the windows' spread."""
    samples = [s for window in windows for s in window]
    row.samples, row.samples_ms = len(samples), [round(s, 5) for s in samples]
    row.windows_ms = [round(statistics.median(window), 5) for window in windows]
    row.run_noise = relative_spread(row.windows_ms)
    noise = run_to_run_half_width([(row.run_noise, len(windows))]) if row.run_noise is not None else 0.0
    row.p50, row.p90, row.p99 = (percentile_with_interval(samples, q, noise) for q in (50, 90, 99))
    row.p50_ms, row.p90_ms, row.p99_ms = row.p50.ms, row.p90.ms, row.p99.ms
    row.p99_estimate = len(samples) < P99_SAMPLES
    row.throughput_per_s = round(row.batch_size / (statistics.fmean(samples) / 1000), 2)


def percentile_with_interval(samples: list[float], q: float, run_noise: float = 0.0) -> Percentile:
    """The q-th percentile with its bootstrap interval, widened by ``run_noise`` (a relative half-width)."""
    value = percentile(samples, q)
    low, high = widened(value, *statistic_interval(samples, lambda resampled: percentile(resampled, q)), run_noise)
    return Percentile(ms=round(value, 5), ci_low=round(low, 5), ci_high=round(high, 5))


class PeakMemory:
    """Peak memory from now: the CUDA allocator's peak on GPU; on CPU the growth of the resident set's
    high-water mark (reset through /proc/self/clear_refs where the kernel allows, else the process's)."""

    def __init__(self, device: torch.device):
        self.device = device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            self.base = torch.cuda.memory_allocated(device)
            return
        self.base = procfs.own_memory_kb("VmRSS")
        procfs.reset_peak_memory()

    def read_mb(self) -> float | None:
        if self.device.type == "cuda":
            return round((torch.cuda.max_memory_allocated(self.device) - self.base) / 2**20, 2)
        peak = procfs.own_memory_kb("VmHWM")
        if peak is None or self.base is None:
            return None
        return round(max(0, peak - self.base) / 1024, 2)


def memory_budget(device: torch.device) -> MemoryBudget:
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        return MemoryBudget(available_mb=round(total / 2**20, 1), what="the GPU's total memory")
    if (available := procfs.available_memory_kb()) is not None:
        return MemoryBudget(available_mb=round(available / 1024, 1), what="the host's available memory")
    return MemoryBudget()
