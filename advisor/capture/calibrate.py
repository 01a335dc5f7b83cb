"""The machine's roofs, measured: the best matmul FLOP/s per dtype and the best copy bandwidth of the device
the step runs on (``machine/peaks.py`` says what they are for).

Square matmuls grow from 256 until one takes MATMUL_LONG_S (or 4096): small ones are launch- and cache-bound,
the largest the machine's best. Each size is run once to warm, then repeated for REPEAT_S, its best run kept; a
copy of COPY_BYTES (far beyond any cache) gives the bandwidth, read and write counted. On a GPU CUDA events time
them. Where measuring fails on a known GPU, its datasheet's figures stand in (said so).

Only a quiet measurement is this machine's: the machine is watched while the roofs are measured
(``machine/conditions.py``), and a measurement beside other work is made again, within QUIET_BUDGET_S; one that
stays contended is used for this audit alone, marked, and never cached. The cache (``ADVISOR_CACHE_DIR``, else
``~/.cache/advisor``) keeps when and under what conditions each entry was measured, keyed by what the roofs hold
for (``cache_key``: the device, the CPU's instruction set as torch and oneDNN use it or the GPU's driver, torch and
the thread count): a change of any of them measures again; the next audit on the same reads it in milliseconds.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from typing import Callable

import torch

from advisor.machine.conditions import Watch, judge
from advisor.machine.peaks import MachinePeaks, published_peaks
from advisor.workload.timing import timer_for

MATMUL_LONG_S = 0.01
LARGEST_SIDE = 4096
REPEAT_S = 0.05
COPY_BYTES = 64 * 2**20
CACHE_FILE = "peaks.json"
QUIET_BUDGET_S = 3.0  # measuring again while contended stops once this is spent (a measurement takes about 1 s)


def cache_key(device: torch.device, device_name: str) -> str:
    """What the roofs hold for: the device, the instruction set torch's kernels and oneDNN's use (an emulated ISA,
    ``ATEN_CPU_CAPABILITY`` or ``ONEDNN_MAX_CPU_ISA``, is another machine) or the GPU's driver, torch, threads."""
    if device.type == "cuda":
        platform = f"driver {_cuda_driver()}, CUDA {torch.version.cuda}"
    else:
        capability = torch.backends.cpu.get_cpu_capability()
        limit = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
        platform = f"{capability}" + (f", oneDNN up to {limit}" if limit else "")
    return f"{device_name}|{platform}|torch {torch.__version__}|threads {torch.get_num_threads()}"


def _cuda_driver() -> str:
    """The CUDA driver's version (12040 for 12.4), as the runtime reads it; "?" where it cannot."""
    try:
        return str(torch._C._cuda_getDriverVersion())  # noqa: SLF001 - the one reader torch has of it
    except (AttributeError, RuntimeError):
        return "?"


def machine_peaks(device: torch.device, device_name: str) -> MachinePeaks:
    """This machine's roofs for ``device``: cached when measured quiet before for the same (``cache_key``)."""
    key = cache_key(device, device_name)
    cached = _read_cache().get(key)
    if cached is not None:
        return MachinePeaks.model_validate({**cached, "source": "cached", "seconds": 0.0})
    try:
        peaks = _measured_quiet(device, device_name, key)
    except (RuntimeError, torch.cuda.OutOfMemoryError) as failure:  # a device too full or too old for a dtype
        published = published_peaks(device_name) if device.type == "cuda" else None
        if published is None:
            raise
        return MachinePeaks(device=device_name, flops_per_s=published[0], bandwidth_bytes_per_s=published[1],
                            source="published", torch_version=torch.__version__, published_flops_per_s=published[0],
                            published_bandwidth_bytes_per_s=published[1],
                            note=f"measuring failed ({type(failure).__name__}: {failure}); the datasheet's peaks")
    if not peaks.contended:
        _write_cache(key, peaks)
    return peaks


def _measured_quiet(device: torch.device, device_name: str, key: str) -> MachinePeaks:
    """Measured with the machine watched; again while other work ran beside it, until quiet or QUIET_BUDGET_S is
    spent (the last measurement then, marked contended)."""
    began = time.perf_counter()
    while True:
        with Watch(readable=True) as watch:
            peaks = _measured(device, device_name)
        reasons = judge(watch.conditions)
        spent = time.perf_counter() - began
        if not reasons or spent + peaks.seconds > QUIET_BUDGET_S:
            break
    return peaks.model_copy(update={
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": key,
        "conditions": watch.conditions, "contended": reasons, "source": "contended" if reasons else "measured",
        "seconds": round(spent, 3)})


def _measured(device: torch.device, device_name: str) -> MachinePeaks:
    began = time.perf_counter()
    dtypes = ["float32", "bfloat16", "float16", "float64"]  # what a step may compute in; slow-precision compares them
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 is float32, whatever the model file set
        flops = {dtype: _best_matmul_rate(device, getattr(torch, dtype)) for dtype in dtypes}
        if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0):
            torch.backends.cuda.matmul.allow_tf32 = True
            flops["tf32"] = _best_matmul_rate(device, torch.float32)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    published = published_peaks(device_name) if device.type == "cuda" else None
    peaks = MachinePeaks(device=device_name, flops_per_s={k: round(v) for k, v in flops.items()},
                         bandwidth_bytes_per_s=round(copy_bandwidth(device)), threads=torch.get_num_threads(),
                         torch_version=torch.__version__, published_flops_per_s=published[0] if published else {},
                         published_bandwidth_bytes_per_s=published[1] if published else 0.0,
                         seconds=round(time.perf_counter() - began, 3))
    return peaks


def _best_matmul_rate(device: torch.device, dtype: torch.dtype) -> float:
    best, side = 0.0, 256
    while side <= LARGEST_SIDE:
        rate = matmul_rate(device, dtype, side)
        best = max(best, rate)
        if 2 * side**3 / rate >= MATMUL_LONG_S:
            break
        side *= 2
    return best


def matmul_rate(device: torch.device, dtype: torch.dtype, side: int) -> float:
    """FLOP/s of the best run of a ``side``-square matmul in ``dtype``."""
    a = torch.randn(side, side, device=device).to(dtype)
    b = torch.randn(side, side, device=device).to(dtype)
    return 2 * side**3 / best_seconds(lambda: torch.mm(a, b), device)


def copy_bandwidth(device: torch.device) -> float:
    """Bytes/s of the best copy of COPY_BYTES (read and written)."""
    source = torch.ones(COPY_BYTES // 4, device=device)
    target = torch.empty_like(source)
    return 2 * COPY_BYTES / best_seconds(lambda: target.copy_(source), device)


def best_seconds(work: Callable[[], object], device: torch.device) -> float:
    """The fastest of the runs of ``work`` within REPEAT_S (three at the least), after one to warm, each timed as a
    step is (``workload/timing.py``: CUDA events on a GPU)."""
    timed = timer_for(device)
    work()
    runs: list[float] = []
    began = time.perf_counter()
    while len(runs) < 3 or time.perf_counter() - began < REPEAT_S:
        runs.append(timed(work) / 1000)
    return max(min(runs), 1e-9)


def _cache_path() -> str:
    folder = os.environ.get("ADVISOR_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "advisor")
    return os.path.join(folder, CACHE_FILE)


def _read_cache() -> dict:
    try:
        with open(_cache_path(), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _write_cache(key: str, peaks: MachinePeaks) -> None:
    """Added to the cache file atomically (audits running side by side each write a whole file); a cache that
    cannot be written only means measuring again next time."""
    path = _cache_path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        cached = {**_read_cache(), key: peaks.model_dump(mode="json", exclude={"source", "seconds"})}
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(cached, handle, indent=1)
        os.replace(temporary, path)
    except OSError:
        pass
