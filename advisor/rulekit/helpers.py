"""What several rules read from evidence the same way: the outermost ops of a family, tensor layouts
from a profiler's shapes and strides, the device's generation, the model's convolutions."""

from __future__ import annotations

from typing import Iterable

from advisor.evidence import Evidence
from advisor.opnames import COMPILED_MARKS, CONV_FUNCTIONS, CONV_MODULES, CONV_OPS, LOW_PRECISION_TYPES
from advisor.trace.parse import Op, Trace


def outermost(trace: Trace, names: Iterable[str]) -> list[Op]:
    """Step ops in ``names`` not nested inside another op of ``names`` (no double counting)."""
    family = frozenset(names)
    return [o for o in trace.step_ops()
            if o.name in family and (o.parent is None or trace.ops[o.parent].name not in family)]


def runs_compiled(trace: Trace) -> bool:
    """Whether the step runs code torch.compile made."""
    return any(o.name.startswith(COMPILED_MARKS) for o in trace.step_ops())


def is_contiguous(dims: list, strides: list) -> bool:
    """Row-major contiguity from a profiler's Input Dims / Input Strides (size-1 dims ignored)."""
    if not isinstance(dims, list) or not isinstance(strides, list) or len(dims) != len(strides):
        return True  # unknown: assume nothing
    expected = 1
    for size, stride in zip(reversed(dims), reversed(strides)):
        if not isinstance(size, int) or not isinstance(stride, int):
            return True
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def is_broadcast(dims: list, strides: list) -> bool:
    """A stride of 0 on a dimension longer than 1: an expanded (broadcast) view."""
    return isinstance(dims, list) and isinstance(strides, list) and any(
        isinstance(size, int) and size > 1 and stride == 0 for size, stride in zip(dims, strides))


def low_precision(op: Op) -> bool:
    return bool(op.input_types) and op.input_types[0] in LOW_PRECISION_TYPES


def measured_gain(ev, dtype: str, over: str = "float32") -> float | None:
    """How many times faster this device's measured matmul roof runs ``dtype`` than ``over`` (below 1: slower);
    None where either was not measured (a datasheet stands in, or an older cache). Advice to change precision
    asks it first: what would be slower on this device is not a gain here."""
    peaks = getattr(ev, "peaks", None)
    if peaks is None or peaks.source == "published":
        return None
    faster, base = peaks.flops_per_s.get(dtype), peaks.flops_per_s.get(over)
    return faster / base if faster and base else None


def slower_than_float32(ev) -> set[str]:
    """The reduced dtypes (bfloat16, float16) this device's measured roofs put below float32: emulated here, so no
    advice of a gain in them (empty where the roofs were not measured)."""
    return {dtype for dtype in ("bfloat16", "float16") if (gain := measured_gain(ev, dtype)) is not None and gain < 1}


def is_ampere_or_newer(env) -> bool:
    """An NVIDIA GPU of compute capability 8.0 or newer: bf16 and TF32 tensor cores."""
    return (env is not None and env.gpu_capability is not None and tuple(env.gpu_capability) >= (8, 0)
            and "AMD" not in env.device_name.upper())


def convolution_sites(ev) -> list[tuple[str, int, str]]:
    """Each convolution of the model once: (file, line, module path or op), graph first, else trace."""
    sites: dict[tuple[str, int, str], None] = {}
    if ev.graph is not None:
        for node in ev.graph.calls():
            if node.module_type in CONV_MODULES or node.target in CONV_FUNCTIONS:
                sites[(node.file, node.line, node.module_path or node.target)] = None
    elif ev.trace is not None:
        for op in outermost(ev.trace, CONV_OPS):
            file, line = (op.src.file, op.src.line) if op.src is not None else ("", 0)
            sites[(file, line, op.name)] = None
    return list(sites)


def no_calls(ev: Evidence, what: str) -> str:
    """A call-watching rule's reason for silence: none of ``what`` ran in the watched steps, or none were watched."""
    return f"no {what} ran in the watched steps" if ev.calls is not None else "the step's calls were not watched in this run"


def shares_unread(ev: Evidence, what: str) -> str:
    """Why a machine-state rule measured nothing: the CPU shares could not be read in the timed window
    (no /proc, or a window shorter than /proc's ticks can share), as the run's conditions say."""
    reasons = [item for item in ev.timing.conditions.unreadable if "/proc" in item or "CPU shares" in item]
    return f"{what} was not measured: " + ("; ".join(reasons) or "the run's conditions hold no CPU times")


NO_GPU_READ = "no GPU's state was read while the step was timed (neither NVML nor nvidia-smi answered)"
