"""Collective communication (NCCL/RCCL on GPUs, gloo on CPUs) that is not overlapped with compute.

What it detects:
    Per profiled step, the time collective kernels (``ncclKernel_*``, ``ncclDevKernel_*``)
    run while no compute kernel runs on any other stream: exposed communication. Without GPU
    collectives, the same from the host: the ranges gloo records around each collective on its
    worker threads (``gloo:all_reduce``), against the CPU ops the other threads run. Reported
    when it is at least ``min_exposed_share`` of the step. A DDP model whose gradients all fit
    one bucket (smaller than the cap) is not reported: its single all-reduce can only start at
    the end of backward, and no bucket setting changes that.

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

from typing import Iterator, Union

from advisor.evidence import Evidence
from advisor.opnames import is_collective, is_collective_call
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.trace.parse import DeviceEvent, Op, Span, Trace


@rule(
    slug="comm-overlap",
    code="ADV111",
    layer=Layer.APPLICATION,
    needs=("trace",),
    severity=Severity.MEDIUM,
    high_at="high_exposed_share",
    thresholds={
        "min_exposed_share": Threshold(0.05, "share of the step in communication not hidden by compute"),
        "high_exposed_share": Threshold(0.2, "exposed share that makes it high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if trace is None or not trace.steps:
        yield Clean(why="the trace marks no step to measure communication against")
        return
    if _single_bucket(ev):
        yield Clean(why="DDP sends all gradients in one bucket, after the backward: there is nothing to overlap")
        return
    communication, compute, measured_on = communication_and_compute(trace)
    if not communication:
        yield Clean(why="no collective communication in the trace (a single process)")
        return
    comm_us = exposed_us = 0.0
    for step in trace.steps:
        comm, exposed = exposed_communication(communication, compute, step)
        comm_us += comm
        exposed_us += exposed
    step_us = sum(s.dur for s in trace.steps)
    share = exposed_us / step_us
    yield ev.share_margin("exposed communication's share of the step", share, th.min_exposed_share)
    if share < th.min_exposed_share:
        return
    overlapped = 1 - exposed_us / comm_us if comm_us else 0.0
    yield Finding(
        message=(f"collectives run {comm_us / len(trace.steps) / 1000:.3g} ms per step, {overlapped:.0%} of it "
                 f"overlapped with compute; the exposed {exposed_us / len(trace.steps) / 1000:.3g} ms is {share:.0%} "
                 "of the step" + _context(ev)),
        impact=share,
        locations=[Location.at(ev.ddp.file, ev.ddp.line)] if ev.ddp is not None and ev.ddp.file else [],
        evidence={"comm_ms_per_step": round(comm_us / len(trace.steps) / 1000, 4),
                  "exposed_ms_per_step": round(exposed_us / len(trace.steps) / 1000, 4),
                  "overlapped_share": round(overlapped, 4), "exposed_share_of_step": round(share, 4),
                  "measured_on": measured_on},
        fix=Fix(summary="let communication overlap the backward pass (DDP buckets, gradient_as_bucket_view=True, "
                        "no find_unused_parameters unless needed; FSDP prefetch)",
                docs=["https://pytorch.org/docs/stable/notes/ddp.html"]),
    )


Timed = Union[DeviceEvent, Op]


def communication_and_compute(trace: Trace) -> tuple[list[Timed], list[Timed], str]:
    """The collectives, the compute they could hide behind, and what they were read from."""
    collectives: list[Timed] = []
    others: list[Timed] = []
    for kernel in trace.kernels:  # one pass: a GPU trace holds hundreds of thousands of kernels
        (collectives if is_collective(kernel.name) else others).append(kernel)
    if collectives:
        return collectives, others, "GPU kernels"
    if not trace.host_collectives:
        return [], [], ""
    comm_threads = {event.tid for event in trace.host_collectives}
    compute = [op for op in trace.ops
               if op.depth == 0 and op.tid not in comm_threads and not is_collective_call(op.name)]
    return list(trace.host_collectives), compute, "gloo ranges and CPU ops"


def _context(ev: Evidence) -> str:
    """What else the exposed time holds in a multi-rank run: a collective waits for the last rank to join."""
    if len(ev.ranks) < 2 and ev.ddp is None:
        return ""
    text = " (on this rank; it includes waiting for slower ranks to join each collective"
    if ev.ddp is not None and ev.ddp.synced_forwards_per_step > 1:
        text += f", and the all-reduces of {ev.ddp.synced_forwards_per_step:g} micro-steps per optimizer step"
    return text + ")"


def _single_bucket(ev: Evidence) -> bool:
    ddp = ev.ddp
    return ddp is not None and len(ddp.bucket_bytes) == 1 and ddp.parameter_bytes <= ddp.bucket_cap_bytes


def exposed_communication(communication: list[Timed], compute: list[Timed], span: Span) -> tuple[float, float]:
    """(collective µs, collective µs with no compute running) inside ``span``."""
    def clipped(events):
        return sorted((max(e.ts, span.ts), min(e.ts + e.dur, span.end)) for e in events
                      if e.ts < span.end and e.ts + e.dur > span.ts)

    comm = clipped(communication)
    compute = _union(clipped(compute))
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
