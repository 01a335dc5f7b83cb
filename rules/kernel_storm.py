"""Small-kernel storm: the step is many tiny operators, bound by dispatch or launch overhead.

What it detects:
    On CPU, a step of at least ``min_ops`` operators whose mean time per operator (the
    profiler-free step time divided by the operator count) is at most ``max_op_cost_ratio``
    times the per-op dispatch floor measured on the same machine in the same run (the time of
    one trivial eager op): the framework's per-op overhead, not arithmetic, sets the pace. Both
    numbers come from the same CPU at the same moment, so the verdict holds on a slower or a
    busier machine. Without a measured floor (a recorded trace), ``max_mean_op_us`` applies. On GPU, at least ``min_kernels``
    kernels per step, most of them shorter than ``short_kernel_us``, with the GPU busy for less
    than ``max_gpu_busy`` of the step: the CPU launches slower than the GPU executes
    (launch-bound). Names the source lines that emit most of the operators.

Why it matters:
    Each eager operator costs a few microseconds of Python and dispatcher work on the host, and
    on GPU a kernel launch of similar cost. When operators do less work than that, adding more
    hardware does nothing; the step is as fast as the host can issue work. A Python loop over
    time steps or a hand-written chain of elementwise ops is the usual cause. A step dominated
    by a few large operators is never reported, however many small ones it also has.

How to fix:
    Fuse: ``torch.compile(model)`` turns elementwise chains into single kernels; on GPU,
    ``torch.compile(model, mode="reduce-overhead")`` adds CUDA graphs, replaying the whole step
    with one launch. Vectorize Python loops (process all time steps, experts or heads in one
    batched op).

Example:
    Before::

        for t in range(steps):                 # 12 tiny ops per iteration
            c = f[t] * c + i[t] * torch.tanh(g[t])

    After::

        model = torch.compile(model)           # fuses the chain; on GPU add mode="reduce-overhead"
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from advisor.evidence import Evidence
from advisor.fixing import replace_target
from advisor.kineto import Trace
from advisor.rule import Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label

# A line that emits this many top-level ops per step runs inside a Python loop (a GRU cell over 64
# time steps emits 64 per line; straight-line code emits one per line and call).
LOOP_OPS_PER_LINE = 8
# Severity: HIGH when the measure is at most half of its threshold (twice as deep in the storm).
HIGH_AT_HALF = 0.5

DOCS = ["https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html",
        "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs"]


@rule(
    slug="kernel-storm",
    code="ADV103",
    layer=Layer.MODEL,
    severity=Severity.MEDIUM,
    thresholds={
        "min_ops": Threshold(200, "operators per step (CPU) before the step can be a storm", "count"),
        "max_op_cost_ratio": Threshold(
            12, "mean step time per operator (CPU), in multiples of the measured per-op dispatch floor, at or below "
                "which dispatch dominates (measured: storms 2.5-5x, conv/attention nets 160-230x)", "x"),
        "max_mean_op_us": Threshold(10, "the same bound in µs, when no dispatch floor was measured", "µs"),
        "min_kernels": Threshold(100, "GPU kernels per step before the step can be a storm", "count"),
        "short_kernel_us": Threshold(10, "a GPU kernel shorter than this is small", "µs"),
        "min_short_share": Threshold(0.5, "share of kernels that are small (GPU)"),
        "max_gpu_busy": Threshold(0.6, "GPU busy share of the step below which it is launch-bound"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if trace is None:
        return
    if trace.kernels:
        yield from _gpu(ev, trace, th)
    else:
        yield from _cpu(ev, trace, th)


def _cpu(ev: Evidence, trace: Trace, th: Thresholds) -> Iterator[Finding]:
    top = trace.top_ops()
    ops_per_step = len(top) / trace.step_count
    if ops_per_step < th.min_ops:
        return
    step_ms = ev.step_ms
    if not step_ms:
        return
    mean_op_us = step_ms * 1000 / ops_per_step
    floor_us = ev.env.dispatch_overhead_us if ev.env is not None else None
    if floor_us:
        depth = mean_op_us / floor_us / th.max_op_cost_ratio
    else:
        depth = mean_op_us / th.max_mean_op_us
    if depth > 1:  # ops big enough to amortize dispatch: a few large ops dominate
        return
    durations = sorted(o.dur for o in top)
    yield Finding(
        severity=Severity.HIGH if depth <= HIGH_AT_HALF else Severity.MEDIUM,
        message=(
            f"{ops_per_step:g} operators per step, {mean_op_us:.2g} µs each on average "
            f"(step {step_ms:.3g} ms): dispatch overhead, not arithmetic, sets the pace"
            + _lines_clause(trace, top)
        ),
        impact=_overhead_share(ev, ops_per_step, step_ms),
        evidence={
            "ops_per_step": ops_per_step,
            "mean_op_us": round(mean_op_us, 3),
            **({"mean_op_in_dispatch_floors": round(mean_op_us / floor_us, 2)} if floor_us else {}),
            "profiled_op_us_p50": round(_quantile(durations, 0.5), 3),
            "profiled_op_us_p90": round(_quantile(durations, 0.9), 3),
            "step_ms": round(step_ms, 4),
            **({"dispatch_overhead_us": round(floor_us, 3)} if floor_us else {}),
        },
        locations=_emitting_lines(trace, top),
        fix=_fix(ev, trace),
    )


def _gpu(ev: Evidence, trace: Trace, th: Thresholds) -> Iterator[Finding]:
    kernels = [k for k in trace.kernels if k.step is not None] if trace.steps else trace.kernels
    per_step = len(kernels) / trace.step_count
    if per_step < th.min_kernels:
        return
    durations = sorted(k.dur for k in kernels)
    short_share = sum(1 for d in durations if d < th.short_kernel_us) / len(durations)
    if short_share < th.min_short_share:
        return
    busy = _busy_share(trace, kernels)
    if busy is not None and busy >= th.max_gpu_busy:
        return  # the GPU is kept busy: small kernels, but not launch-bound
    busy_text = f", GPU busy {busy:.0%} of the step" if busy is not None else ""
    launch = _launch_stats(trace, kernels)
    unit = "per step" if trace.steps else "in the trace"
    yield Finding(
        severity=Severity.HIGH if (busy is not None and busy < th.max_gpu_busy * HIGH_AT_HALF) else Severity.MEDIUM,
        message=(
            f"{per_step:g} GPU kernels {unit}, {short_share:.0%} shorter than {th.short_kernel_us:g} µs "
            f"(median {_quantile(durations, 0.5):.3g} µs){busy_text}: launch-bound"
        ),
        impact=(1 - busy) if busy is not None else None,
        evidence={
            "kernels_per_step": per_step,
            "short_kernel_share": round(short_share, 4),
            "kernel_us_p50": round(_quantile(durations, 0.5), 3),
            "kernel_us_p90": round(_quantile(durations, 0.9), 3),
            **({"gpu_busy_share": round(busy, 4)} if busy is not None else {}),
            **launch,
        },
        locations=_emitting_lines(trace, trace.top_ops()),
        fix=_fix(ev, trace),
    )


def _launch_stats(trace: Trace, kernels: list) -> dict:
    """Launch delay (launch call to kernel start) and how often launching took longer than running."""
    pairs = [(launch, k) for k in kernels if (launch := trace.launch_of(k)) is not None]
    if not pairs:
        return {}
    delays = sorted(k.ts - r.ts for r, k in pairs)
    return {
        "launch_delay_us_p50": round(_quantile(delays, 0.5), 3),
        "launch_delay_us_p90": round(_quantile(delays, 0.9), 3),
        "launch_slower_than_kernel_share": round(sum(1 for r, k in pairs if r.dur >= k.dur) / len(pairs), 4),
    }


def _busy_share(trace: Trace, kernels: list) -> float | None:
    """GPU busy time over the profiled steps' span (all GPU activity inside the spans)."""
    if not trace.steps:
        return None
    span = sum(s.dur for s in trace.steps)
    busy = sum(trace.gpu_gaps(step)[0] for step in trace.steps)
    return min(busy / span, 1.0) if span > 0 else None


def _emitting_lines(trace: Trace, ops: list) -> list[Location]:
    counts = Counter((o.src.file, o.src.line) for o in ops if o.src is not None)
    return [
        Location.at(file, line, count_per_step=count / trace.step_count,
                    note=f"{count / trace.step_count:g} operators per step from this line")
        for (file, line), count in counts.most_common(5)
    ]


def _lines_clause(trace: Trace, ops: list) -> str:
    counts = Counter((o.src.file, o.src.line) for o in ops if o.src is not None)
    if not counts:
        return ""
    (file, line), count = counts.most_common(1)[0]
    return f"; {count / len(ops):.0%} of them from {site_label(file, line)}"


def _overhead_share(ev: Evidence, ops_per_step: float, step_ms: float) -> float | None:
    """Operators times the measured per-op dispatch floor, as a share of the step."""
    if ev.env is None or not ev.env.dispatch_overhead_us:
        return None
    return round(min(1.0, ops_per_step * ev.env.dispatch_overhead_us / (step_ms * 1000)), 4)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]


def _fix(ev: Evidence, trace: Trace) -> Fix:
    looped = any(count / trace.step_count >= LOOP_OPS_PER_LINE for count in
                 Counter((o.src.file, o.src.line) for o in trace.top_ops() if o.src is not None).values())
    advice = ["torch.compile(model) to fuse the small ops"]
    if ev.on_cuda or trace.kernels:
        advice.append('torch.compile(model, mode="reduce-overhead") to replay the step as a CUDA graph')
    if looped:
        advice.append("vectorize the Python loop that emits them (batch the iterations into one op)")
    return Fix(
        summary="; ".join(advice),
        before="model = Model()\nout = model(x)",
        after="model = torch.compile(Model())" + ('  # mode="reduce-overhead" on GPU' if not ev.on_cuda else
                                                  '\nmodel = torch.compile(Model(), mode="reduce-overhead")')
              + "\nout = model(x)",
        docs=DOCS,
    )


@check.fix(tolerance=1e-4, what="torch.compile (reduce-overhead on CUDA)")
def fix(target, finding):
    """Compile the model: fuse the small ops (and on CUDA replay them as a CUDA graph)."""
    return replace_target(target, compile_mode="reduce-overhead" if target.device.type == "cuda" else "default")
