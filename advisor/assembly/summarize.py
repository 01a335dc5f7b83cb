"""Condense evidence into the report's summaries (computed here so rendering never computes)."""

from __future__ import annotations

import functools
import os
from collections import Counter, defaultdict

from advisor.evidence import Evidence, GraphCapture
from advisor.machine.peaks import published_peaks
from advisor.opnames import COPY_AND_LAYOUT_OPS, MATMUL_OPS
from advisor.report.schema import GraphSummary, OpShare, Performance, Roofline, TimelineBar, TraceSummary
from advisor.trace.parse import SYNC_RUNTIME_CALLS, Op, Trace
from advisor.trace.roofline import operator_rates

TOP_OPS = 12
ROOFLINE_LEAST, ROOFLINE_MOST = 0.005, 20
TIMELINE_BARS = 400
_CATEGORY_WORDS = (
    ("norm", ("norm",)),
    ("softmax / reduction", ("softmax", "sum", "mean", "max", "min", "argmax", "topk", "cumsum", "logsumexp")),
    ("optimizer", ("_foreach", "adam", "sgd", "optimizer")),
    ("backward (autograd)", ("autograd::", "backward")),
)


def summarize_trace(trace: Trace) -> TraceSummary:
    steps = trace.step_count
    ops = trace.step_ops()
    calls = Counter(op.name for op in ops)
    self_us = dict.fromkeys(calls, 0.0)
    for op in ops:
        if op.self_dur > 0:
            self_us[op.name] += op.self_dur
    total = sum(self_us.values()) or 1.0
    top = sorted(self_us.items(), key=lambda item: item[1], reverse=True)[:TOP_OPS]
    kernels = [k for k in trace.kernels if k.step is not None] if trace.steps else trace.kernels
    memcpy = [m for m in trace.memcpy if m.step is not None] if trace.steps else trace.memcpy
    top_ops = trace.top_ops()
    categories, timeline, timeline_ms = _categories(top_ops), *_timeline(trace, top_ops)
    return TraceSummary(
        categories=categories, timeline=timeline, timeline_ms=timeline_ms,
        file=os.path.basename(trace.path),
        steps_profiled=len(trace.steps),
        step_ms_profiled=trace.mean_step_us() / 1000.0,
        ops_per_step=len(top_ops) / steps,
        all_ops_per_step=len(ops) / steps,
        kernels_per_step=len(kernels) / steps,
        memcpy_per_step=len(memcpy) / steps,
        syncs_per_step=sum(1 for r in trace.runtime if r.name in SYNC_RUNTIME_CALLS
                           and (r.step is not None or not trace.steps)) / steps,
        source_attributed=trace.source_annotated,
        note=(f"{trace.repaired_lines} event name(s) held bare double quotes (invalid JSON as the profiler "
              "wrote it); advisor repaired them while reading" if trace.repaired_lines else ""),
        top_ops=[
            OpShare(name=name, self_ms_per_step=us / steps / 1000.0, share=us / total, calls_per_step=calls[name] / steps)
            for name, us in top
        ],
    )


def summarize_roofline(ev: Evidence) -> Roofline | None:
    """The operator groups holding at least ROOFLINE_LEAST of the profiled step (ROOFLINE_MOST at the most)."""
    if ev.trace is None or ev.peaks is None or not ev.trace.steps:
        return None
    rates = operator_rates(ev.trace, ev.peaks)
    shown = [rate for rate in rates if rate.share_of_step >= ROOFLINE_LEAST][:ROOFLINE_MOST]
    return Roofline(peaks=ev.peaks, operators=shown, shown_share=round(sum(r.share_of_step for r in shown), 4),
                    note="" if ev.trace.source_annotated else "operators are attributed to functions, not lines")


def summarize_graph(graph: GraphCapture) -> GraphSummary:
    calls = graph.calls()
    return GraphSummary(
        method=graph.method,
        graph_count=graph.graph_count,
        node_count=len(graph.nodes),
        call_count=len(calls),
        breaks=graph.breaks,
        note=graph.note,
        top_targets=dict(Counter(n.target for n in calls).most_common(10)),
    )


@functools.lru_cache(maxsize=4096)  # a trace repeats a few hundred op names thousands of times
def op_category(name: str) -> str:
    if name in MATMUL_OPS:
        return "matmul / conv"
    if name in COPY_AND_LAYOUT_OPS:
        return "copies / layout"
    lowered = name.lower()
    for category, words in _CATEGORY_WORDS:
        if any(word in lowered for word in words):
            return category
    return "elementwise / other"


def _categories(top_ops: list[Op]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for op in top_ops:
        totals[op_category(op.name)] += op.dur
    whole = sum(totals.values()) or 1.0
    return {k: round(v / whole, 4) for k, v in sorted(totals.items(), key=lambda item: -item[1])}


def _timeline(trace: Trace, top_ops: list[Op]) -> tuple[list[TimelineBar], float]:
    if not trace.steps:
        return [], 0.0
    step = trace.steps[0]
    ops = sorted((o for o in top_ops if o.step == 0), key=lambda o: -o.dur)[:TIMELINE_BARS]
    bars = [TimelineBar(name=o.name, category=op_category(o.name), start=round((o.ts - step.ts) / step.dur, 5),
                        width=round(o.dur / step.dur, 5)) for o in sorted(ops, key=lambda o: o.ts)]
    return bars, step.dur / 1000.0


def summarize_performance(ev: Evidence) -> Performance | None:
    step_ms = ev.step_ms
    if not step_ms:
        return None
    performance = Performance(steps_per_s=round(1000.0 / step_ms, 3))
    if ev.target.batch_size:
        performance.samples_per_s = round(ev.target.batch_size * 1000.0 / step_ms, 2)
    if ev.flops is not None and ev.flops.note:
        performance.flops_note = ev.flops.note
    if ev.flops is not None and ev.flops.total:
        performance.achieved_tflops = round(ev.flops.total / (step_ms / 1000.0) / 1e12, 5)
        peak, performance.peak_note = _peak(ev)
        if peak:
            performance.peak_tflops = round(peak / 1e12, 5)
            performance.peak_share = round(performance.achieved_tflops / performance.peak_tflops, 5)
    return performance


def _peak(ev: Evidence) -> tuple[float | None, str]:
    """The device's best matmul FLOP/s in any dtype: measured on this machine (the roofs), else a known GPU's
    datasheet figure; with the words that say which."""
    if ev.peaks is not None and ev.peaks.flops_per_s:
        dtype, peak = max(ev.peaks.flops_per_s.items(), key=lambda item: item[1])
        return peak, f"of this machine's best measured matmul rate ({dtype}, {peak / 1e12:.3g} TFLOP/s)"
    name = ev.env.device_name if ev.env is not None else ""
    published = published_peaks(name) if ev.on_cuda else None
    if published is not None:
        dtype, peak = max(published[0].items(), key=lambda item: item[1])
        return peak, f"of the {name}'s dense {dtype} peak on its datasheet ({peak / 1e12:g} TFLOP/s)"
    return None, "the device's peak is not in advisor's table" if ev.on_cuda else "the machine's roofs were not measured"
