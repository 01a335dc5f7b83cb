"""Condense evidence into the report's summaries (computed here so rendering never computes)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

from advisor.evidence import GraphCapture
from advisor.kineto import SYNC_RUNTIME_CALLS, Trace
from advisor.report.model import GraphSummary, OpShare, TraceSummary

TOP_OPS = 12


def summarize_trace(trace: Trace) -> TraceSummary:
    steps = trace.step_count
    ops = trace.step_ops()
    self_us: dict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    for op in ops:
        self_us[op.name] += max(op.self_dur, 0.0)
        calls[op.name] += 1
    total = sum(self_us.values()) or 1.0
    top = sorted(self_us.items(), key=lambda item: item[1], reverse=True)[:TOP_OPS]
    kernels = [k for k in trace.kernels if k.step is not None] if trace.steps else trace.kernels
    memcpy = [m for m in trace.memcpy if m.step is not None] if trace.steps else trace.memcpy
    return TraceSummary(
        file=os.path.basename(trace.path),
        steps_profiled=len(trace.steps),
        step_ms_profiled=trace.mean_step_us() / 1000.0,
        ops_per_step=len(trace.top_ops()) / steps,
        all_ops_per_step=len(ops) / steps,
        kernels_per_step=len(kernels) / steps,
        memcpy_per_step=len(memcpy) / steps,
        syncs_per_step=sum(1 for r in trace.runtime if r.name in SYNC_RUNTIME_CALLS
                           and (r.step is not None or not trace.steps)) / steps,
        source_attributed=trace.source_annotated,
        top_ops=[
            OpShare(name=name, self_ms_per_step=us / steps / 1000.0, share=us / total, calls_per_step=calls[name] / steps)
            for name, us in top
        ],
    )


def summarize_graph(graph: GraphCapture) -> GraphSummary:
    calls = graph.calls()
    return GraphSummary(
        method=graph.method,
        graph_count=graph.graph_count,
        node_count=len(graph.nodes),
        call_count=len(calls),
        breaks=graph.breaks,
        top_targets=dict(Counter(n.target for n in calls).most_common(10)),
    )
