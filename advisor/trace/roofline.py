"""Each operator group of the profiled step against the machine's roofs: the FLOPs and bytes its input shapes say
it does, the rate it achieved, and the roof at its arithmetic intensity (``machine/peaks.py``).

An operator group is one aten operator at one line of the user's (its backward at the forward's line, apart).
Work comes from the trace's recorded shapes: matmuls (``mm``, ``addmm``, ``bmm``, ``baddbmm``: 2·M·K·N),
convolutions and their backward, fused attention (2·L·S·(E+Ev) per head, twice that backward) and every other
operator that does its own work (a leaf of the trace that is no view: one FLOP an element of its largest input,
or none for a copy, its inputs read and an output of its largest input's size written). An operator inside a
matmul or attention is that operator's own. The roof at an intensity I (FLOP per byte) is the lesser of the dtype's
matmul peak and I times the bandwidth: the efficiency is the achieved rate over it. The profiler's own cost per
operator is in the times, so small operators read lower than they run alone.
"""

from __future__ import annotations

import ast
import math

from advisor.machine.peaks import MachinePeaks
from advisor.opnames import (
    ROOF_ATTENTION,
    ROOF_ATTENTION_BACKWARD,
    ROOF_CONV,
    ROOF_MOVES_ONLY,
    ROOF_NO_WORK,
    TRACE_BIAS_FIRST,
    TRACE_MATMULS,
)
from advisor.records import Field, Record
from advisor.trace.model import Op, SourceRef, Trace

# Bytes per element of each type name the profiler records ("Input type"); kernel-storm reads it too.
ITEMSIZE = {"float": 4, "double": 8, "c10::BFloat16": 2, "BFloat16": 2, "c10::Half": 2, "Half": 2, "long int": 8,
            "int": 4, "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1, "c10::Float8_e4m3fn": 1,
            "c10::Float8_e5m2": 1, "c10::complex<float>": 8}
DTYPES = {"float": "float32", "double": "float64", "c10::BFloat16": "bfloat16", "BFloat16": "bfloat16",
          "c10::Half": "float16", "Half": "float16"}
FORMULA_OPS = TRACE_MATMULS | ROOF_ATTENTION | ROOF_ATTENTION_BACKWARD | ROOF_CONV


class OperatorRate(Record):
    op: str
    file: str = ""
    line: int = 0
    backward: bool = Field(default=False, description="the backward of the operator at this line")
    dtype: str = ""
    calls_per_step: float = 0.0
    us_per_step: float = 0.0
    share_of_step: float = Field(default=0.0, description="of the profiled step's time")
    flops_per_step: float = 0.0
    bytes_per_step: float = 0.0
    achieved_flops_per_s: float = 0.0
    achieved_bytes_per_s: float = 0.0
    intensity: float | None = Field(default=None, description="FLOP per byte; None for an operator that only moves data")
    roof_flops_per_s: float | None = Field(default=None, description="the roof at its intensity")
    efficiency: float = Field(default=0.0, description="achieved over the roof (bandwidth for a copy)")
    bound: str = Field(default="memory", description="compute | memory: which roof holds it at its intensity")
    shapes: list = Field(default_factory=list, description="the first call's input shapes")


def operator_rates(trace: Trace, peaks: MachinePeaks) -> list[OperatorRate]:
    """Every operator group with work, most time first (made once per trace and roofs: a copy of the list)."""
    key = peaks.model_dump_json()
    made = trace._operator_rates
    if made is None or made[0] != len(trace.ops) or made[1] != key:
        made = trace._operator_rates = (len(trace.ops), key, _operator_rates(trace, peaks))
    return list(made[2])


def _operator_rates(trace: Trace, peaks: MachinePeaks) -> list[OperatorRate]:
    steps = max(1, len(trace.steps))
    step_us = trace.mean_step_us() or 0.0
    groups: dict[tuple, list] = {}  # key -> [calls, us, flops, bytes, dtype, shapes]
    for op in trace.step_ops():
        if not _counted(trace, op):
            continue
        work = op_work(op)
        if work is None:
            continue
        flops, moved, dtype = work
        ref, backward = _place(trace, op)
        key = (op.name, ref.file if ref else "", ref.line if ref else 0, backward)
        group = groups.setdefault(key, [0, 0.0, 0.0, 0.0, dtype, [list(d) for d in op.input_dims[:3]]])
        group[0] += 1
        group[1] += op.dur
        group[2] += flops
        group[3] += moved
    rates = [_rate(key, *values, steps=steps, step_us=step_us, peaks=peaks) for key, values in groups.items()]
    return sorted((r for r in rates if r.us_per_step > 0), key=lambda r: r.us_per_step, reverse=True)


def formula_flops(trace: Trace) -> dict[str, float] | None:
    """FLOPs per profiled step of the matmuls, convolutions and fused attention the step ran (forward and backward,
    every micro-step), by operator without its ``aten::`` prefix, from their recorded shapes; an operator inside
    another one counted is that one's. None for a trace recorded without shapes."""
    from advisor.trace.model import ShapedOp

    if not any(isinstance(op, ShapedOp) for op in trace.ops):
        return None
    by_op: dict[str, float] = {}
    for op in trace.step_ops():
        if op.name in FORMULA_OPS and not _inside_formula(trace, op) and (work := op_work(op)) is not None:
            name = op.name.removeprefix("aten::")
            by_op[name] = by_op.get(name, 0.0) + work[0] / trace.step_count
    return by_op


def _place(trace: Trace, op: Op) -> tuple[SourceRef | None, bool]:
    """The user's line of an operator (its own, else the nearest enclosing operator's: a module's leaf runs under
    the call made at that line), and whether it runs in the backward of the line's forward."""
    while op is not None:
        if op.src is not None or op.grad_of is not None:
            return op.src or op.grad_of, op.src is None
        op = trace.ops[op.parent] if op.parent is not None else None
    return None, False


def _counted(trace: Trace, op: Op) -> bool:
    """A matmul, convolution or attention itself; else a leaf of the trace inside none of them, that is no view."""
    if op.name in FORMULA_OPS:
        return not _inside_formula(trace, op)
    if op.name in ROOF_NO_WORK or not op.name.startswith("aten::") or trace.children(op):
        return False
    return not _inside_formula(trace, op)


def _inside_formula(trace: Trace, op: Op) -> bool:
    parent = op.parent
    while parent is not None:
        if trace.ops[parent].name in FORMULA_OPS:
            return True
        parent = trace.ops[parent].parent
    return False


def op_work(op: Op) -> tuple[float, float, str] | None:
    """(FLOPs, bytes read and written, dtype) of one call, from its recorded input shapes; None without tensors."""
    tensors = [(list(dims), ITEMSIZE[kind]) for dims, kind in zip(op.input_dims, op.input_types)
               if kind in ITEMSIZE and isinstance(dims, (list, tuple))]
    if not tensors:
        return None
    dtype = next((DTYPES[kind] for kind in op.input_types if kind in DTYPES), "")
    size = tensors[0][1]
    if op.name in TRACE_MATMULS:
        operands = [dims for dims, _ in tensors][1 if op.name in TRACE_BIAS_FIRST else 0:]
        if len(operands) < 2 or len(operands[0]) < 2 or len(operands[1]) < 2:
            return None
        a, b = operands[0], operands[1]
        batch = math.prod(a[:-2])
        m, k, n = a[-2], a[-1], b[-1]
        out = batch * m * n
        flops = 2.0 * batch * m * k * n + (out if op.name in TRACE_BIAS_FIRST else 0)
        return flops, (sum(math.prod(d) for d, _ in tensors) + out) * size, dtype
    if op.name in ROOF_ATTENTION or op.name in ROOF_ATTENTION_BACKWARD:
        backward = op.name in ROOF_ATTENTION_BACKWARD
        q, k, v = [dims for dims, _ in tensors][1:4] if backward else [dims for dims, _ in tensors][:3]
        if len(q) < 2 or len(k) < 2 or len(v) < 2:
            return None
        forward = 2.0 * math.prod(q[:-2]) * q[-2] * k[-2] * (q[-1] + v[-1])
        moved = (math.prod(q) + math.prod(k) + math.prod(v) + math.prod(q[:-1]) * v[-1]) * size
        return (2 * forward, 2 * moved, dtype) if backward else (forward, moved, dtype)
    if op.name in ROOF_CONV:
        return _convolution(op, tensors, dtype)
    largest = max(math.prod(dims) for dims, _ in tensors)
    moved = sum(math.prod(dims) * itemsize for dims, itemsize in tensors) + largest * size
    return (0.0 if op.name in ROOF_MOVES_ONLY else float(largest)), float(moved), dtype


def _convolution(op: Op, tensors: list, dtype: str) -> tuple[float, float, str] | None:
    shapes = [dims for dims, _ in tensors]
    size = tensors[0][1]
    constants = [_literal(text) for text in op.concrete_inputs]
    if op.name == "aten::convolution_backward":  # (grad_output, input, weight, bias_sizes, ..., groups, output_mask)
        if len(shapes) < 3:
            return None
        grad_out, given, weight = shapes[:3]
        mask = next((c for c in reversed(constants) if isinstance(c, list) and c and isinstance(c[0], bool)), [True, True])
        passes = sum(1 for wanted in mask[:2] if wanted) or 1
        flops = 2.0 * math.prod(grad_out) * math.prod(weight[1:]) * passes
        return flops, (math.prod(grad_out) + 2 * math.prod(given) + 2 * math.prod(weight)) * size, dtype
    if len(shapes) < 2 or len(shapes[0]) < 3:  # (input, weight, bias, stride, padding, dilation, transposed, ...)
        return None
    given, weight = shapes[0], shapes[1]
    lists = [c for c in constants if isinstance(c, list)]
    spatial = len(given) - 2
    stride, padding, dilation = (lists + [[1] * spatial] * 3)[:3] if len(lists) >= 3 else ([1] * spatial,) * 3
    transposed = any(c is True for c in constants)
    if transposed:
        flops = 2.0 * math.prod(given) * math.prod(weight[1:])
        out = [given[0], weight[1]] + [(i - 1) * s + d * (k - 1) + 1 - 2 * p for i, k, s, p, d in
                                         zip(given[2:], weight[2:], stride, padding, dilation)]
    else:
        out = [given[0], weight[0]] + [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, s, p, d in
                                         zip(given[2:], weight[2:], stride, padding, dilation)]
        flops = 2.0 * math.prod(out) * math.prod(weight[1:])
    return flops, (math.prod(given) + math.prod(weight) + math.prod(out)) * size, dtype


def _literal(text: str):
    try:
        return ast.literal_eval(text.replace("true", "True").replace("false", "False")) if text else None
    except (ValueError, SyntaxError):
        return None


def _rate(key: tuple, calls: int, us: float, flops: float, moved: float, dtype: str, shapes: list, *, steps: int,
          step_us: float, peaks: MachinePeaks) -> OperatorRate:
    name, file, line, backward = key
    seconds = us / steps / 1e6
    per_step_flops, per_step_bytes = flops / steps, moved / steps
    achieved_flops = per_step_flops / seconds if seconds > 0 else 0.0
    achieved_bytes = per_step_bytes / seconds if seconds > 0 else 0.0
    bandwidth = peaks.bandwidth_bytes_per_s
    if per_step_flops > 0 and per_step_bytes > 0:
        intensity = per_step_flops / per_step_bytes
        peak = peaks.flops_for(dtype)
        roof = min(peak, intensity * bandwidth) if bandwidth > 0 else peak
        efficiency = achieved_flops / roof if roof > 0 else 0.0
        bound = "compute" if bandwidth > 0 and peak <= intensity * bandwidth else "memory"
    else:
        intensity, roof, bound = None, None, "memory"
        efficiency = achieved_bytes / bandwidth if bandwidth > 0 else 0.0
    return OperatorRate(op=name, file=file, line=line, backward=backward, dtype=dtype, calls_per_step=calls / steps,
                        us_per_step=us / steps, share_of_step=min(1.0, us / steps / step_us) if step_us > 0 else 0.0,
                        flops_per_step=per_step_flops, bytes_per_step=per_step_bytes, achieved_flops_per_s=achieved_flops,
                        achieved_bytes_per_s=achieved_bytes, intensity=intensity, roof_flops_per_s=roof,
                        efficiency=efficiency, bound=bound, shapes=shapes)
