"""Collective communication (NCCL/RCCL) that is not overlapped with compute.

What it detects:
    Per profiled step, the time collective kernels (``ncclKernel_*``, ``ncclDevKernel_*``)
    run while no compute kernel runs on any other stream: exposed communication. Reported when
    it is at least ``min_exposed_share`` of the step.

Why it matters:
    Data-parallel training overlaps gradient all-reduce with the backward pass; communication
    that is not hidden adds directly to every step and grows with the number of ranks.

How to fix:
    Let DDP overlap: keep ``bucket_cap_mb`` moderate so buckets start during backward, avoid
    syncs that serialize communication (``find_unused_parameters=True`` when not needed),
    use ``gradient_as_bucket_view=True``; for FSDP enable forward/backward prefetch.

Example:
    Before::

        model = DDP(model, find_unused_parameters=True)

    After::

        model = DDP(model, gradient_as_bucket_view=True)   # buckets all-reduce during backward
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.kineto import Span, Trace
from advisor.opsets import is_collective
from advisor.rule import Finding, Fix, Layer, Severity, Threshold, Thresholds, rule


@rule(
    slug="comm-overlap",
    code="ADV111",
    layer=Layer.APPLICATION,
    severity=Severity.MEDIUM,
    thresholds={
        "min_exposed_share": Threshold(0.05, "share of the step in communication not hidden by compute"),
        "high_exposed_share": Threshold(0.2, "exposed share that makes it high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if trace is None or not trace.steps or not any(is_collective(k.name) for k in trace.kernels):
        return
    comm_us = exposed_us = 0.0
    for step in trace.steps:
        comm, exposed = exposed_communication(trace, step)
        comm_us += comm
        exposed_us += exposed
    step_us = sum(s.dur for s in trace.steps)
    share = exposed_us / step_us
    if share < th.min_exposed_share:
        return
    overlapped = 1 - exposed_us / comm_us if comm_us else 0.0
    yield Finding(
        severity=Severity.HIGH if share >= th.high_exposed_share else Severity.MEDIUM,
        message=(f"collectives run {comm_us / len(trace.steps) / 1000:.3g} ms per step, {overlapped:.0%} of it "
                 f"overlapped with compute; the exposed {exposed_us / len(trace.steps) / 1000:.3g} ms is {share:.0%} "
                 "of the step"),
        impact=share,
        evidence={"comm_ms_per_step": round(comm_us / len(trace.steps) / 1000, 4),
                  "exposed_ms_per_step": round(exposed_us / len(trace.steps) / 1000, 4),
                  "overlapped_share": round(overlapped, 4), "exposed_share_of_step": round(share, 4)},
        fix=Fix(summary="let communication overlap the backward pass (DDP buckets, gradient_as_bucket_view=True, "
                        "no find_unused_parameters unless needed; FSDP prefetch)",
                before="model = DDP(model, find_unused_parameters=True)",
                after="model = DDP(model, gradient_as_bucket_view=True)",
                docs=["https://pytorch.org/docs/stable/notes/ddp.html"]),
    )


def exposed_communication(trace: Trace, span: Span) -> tuple[float, float]:
    """(collective µs, collective µs with no compute kernel running) inside ``span``."""
    def clipped(events):
        return sorted((max(e.ts, span.ts), min(e.ts + e.dur, span.end)) for e in events
                      if e.ts < span.end and e.ts + e.dur > span.ts)

    comm = clipped(k for k in trace.kernels if is_collective(k.name))
    compute = _union(clipped(k for k in trace.kernels if not is_collective(k.name)))
    total = exposed = 0.0
    first = 0  # both lists are sorted and disjoint: walk the compute intervals once
    for start, end in _union(comm):
        total += end - start
        while first < len(compute) and compute[first][1] <= start:
            first += 1
        covered, index = 0.0, first
        while index < len(compute) and compute[index][0] < end:
            covered += max(0.0, min(end, compute[index][1]) - max(start, compute[index][0]))
            index += 1
        exposed += (end - start) - covered
    return total, exposed


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in intervals:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
