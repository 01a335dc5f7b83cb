"""The environment the audit ran in: versions, devices, CPU features and performance flags."""

from __future__ import annotations

import os
import platform
import statistics
import time

import torch

from advisor.evidence import Environment
from advisor.machine import procfs


def capture_environment(device: torch.device) -> Environment:
    """Read after the model file ran: user code may change these flags at import time."""
    proc_model, flags = procfs.cpu_model_and_flags()
    cpu_model = platform.processor() or proc_model
    try:
        available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        available = os.cpu_count() or 0
    env = Environment(
        python=platform.python_version(),
        platform=platform.platform(),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        cpu_model=cpu_model,
        cpu_cores_logical=os.cpu_count() or 0,
        cpu_cores_available=available,
        cpu_capability=_cpu_capability(),
        # the CPU's flags and what oneDNN will really use (ONEDNN_MAX_CPU_ISA can cap it)
        cpu_native_bf16=bool(flags & {"avx512_bf16", "amx_bf16"}) and _onednn_bf16(),
        cpu_amx=bool(flags & {"amx_bf16", "amx_tile"}),
        torch_threads=torch.get_num_threads(),
        torch_interop_threads=torch.get_num_interop_threads(),
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        cudnn_enabled=torch.backends.cudnn.enabled,
        cudnn_benchmark=torch.backends.cudnn.benchmark,
        cudnn_deterministic=torch.backends.cudnn.deterministic,
        tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
        tf32_cudnn=torch.backends.cudnn.allow_tf32,
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
        anomaly_detection=torch.is_anomaly_enabled(),
        device_name=cpu_model,
        sync_operators=sync_operators(),
        foreach_operators=foreach_operators(),
    )
    env.dispatch_overhead_us = measure_dispatch_overhead(device)
    env.memory_bandwidth_gbs, env.matmul_gflops = measure_device_speed(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        env.device_name = torch.cuda.get_device_name(index)
        env.gpu_capability = tuple(torch.cuda.get_device_capability(index))
        env.gpu_count = torch.cuda.device_count()
        env.cudnn_version = torch.backends.cudnn.version()
    return env


# torch's operator tags for an output the host must wait for: its value (``.item()``, ``equal``) or its size
# (``nonzero``, ``unique``, boolean-mask ``index``)
SYNC_TAGS = {"data_dependent_output": "value", "dynamic_output_shape": "size"}


def sync_operators() -> dict[str, str]:
    """Every aten operator this torch tags as making the host wait for a device result ("value" or "size"), from
    its operator registry: what an operator is, not a list of names kept by hand (0.03 s)."""
    wanted = {getattr(torch.Tag, tag): kind for tag, kind in SYNC_TAGS.items() if hasattr(torch.Tag, tag)}
    found: dict[str, str] = {}
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::") or schema.name in found:
            continue
        try:  # the registry's own lookup, without building an OpOverload for each of ~2,500 schemas
            tags = torch._C._get_operation_overload(schema.name, schema.overload_name)[2]
        except Exception:  # noqa: BLE001 - a schema without a kernel here, or another torch's lookup
            packet = getattr(torch.ops.aten, schema.name[len("aten::"):], None)
            overload = getattr(packet, schema.overload_name or "default", None) if packet is not None else None
            tags = getattr(overload, "tags", ())
        for tag in tags:
            if tag in wanted and found.get(schema.name) != "value":  # a value read says more than a size
                found[schema.name] = wanted[tag]
    return found


def foreach_operators() -> list[str]:
    """The operators this torch runs over a list of tensors at once (``torch._foreach_add_`` -> "add")."""
    return sorted({name[len("_foreach_"):].rstrip("_") for name in dir(torch) if name.startswith("_foreach_")})


def _cpu_capability() -> str:
    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # torch < 2.1
        return ""


def measure_dispatch_overhead(device: torch.device, repeats: int = 2000) -> float:
    """Median host time of a one-element add: what every eager op costs before doing any work."""
    a = torch.ones(1, device=device)
    b = torch.ones(1, device=device)
    for _ in range(200):
        torch.add(a, b)
    samples = []
    for _ in range(repeats // 100):
        begin = time.perf_counter_ns()
        for _ in range(100):
            torch.add(a, b)
        samples.append((time.perf_counter_ns() - begin) / 100 / 1000)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return statistics.median(samples)


def measure_device_speed(device: torch.device) -> tuple[float, float]:
    """(copy bandwidth GB/s over a 64 MB buffer, fp32 matmul GFLOP/s at 512³): what a step's bytes
    and FLOPs cost on this device, to tell work from per-op overhead (kernel-storm). Its source is never written:
    on a CPU its pages read as the kernel's zero page, so the copy reads from cache and writes to memory, closer to
    what a step's small operators meet than DRAM's bandwidth (the roofs, ``calibrate.py``, measure DRAM's), and
    what kernel-storm's thresholds were set against."""
    def best_seconds(run, repeats: int = 7) -> float:
        for _ in range(2):
            run()
        samples = []
        for _ in range(repeats):
            begin = time.perf_counter()
            run()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            samples.append(time.perf_counter() - begin)
        return min(samples)

    source = torch.empty(16 * 1024 * 1024, device=device)
    target = torch.empty_like(source)
    copy_s = best_seconds(lambda: target.copy_(source))
    a, b = torch.randn(512, 512, device=device), torch.randn(512, 512, device=device)
    matmul_s = best_seconds(lambda: torch.mm(a, b))
    return round(2 * source.numel() * 4 / copy_s / 1e9, 2), round(2 * 512 ** 3 / matmul_s / 1e9, 2)


def device_name(device: torch.device) -> str:
    """The GPU's name on CUDA, else the CPU's model."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device.index if device.index is not None else torch.cuda.current_device())
    return procfs.cpu_model_and_flags()[0] or platform.processor()


def _onednn_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
