"""Frequent sequences of short GPU kernels under one CPU op: candidates for fusion.

What it detects:
    CPU operators whose GPU work is several short kernels (each under ``short_kernel_us``)
    launched back to back, grouped by the operator and its kernel sequence, reported when a
    sequence repeats at least ``min_per_step`` times per step. Each kernel pays a launch and
    a round trip through GPU memory; the sequence's kernels could be one.

Why it matters:
    A chain of small elementwise or reduction kernels is memory-bound: each reads and writes
    the whole tensor. Fused into one kernel, the data is read once, and the launches (each a
    few microseconds of host time) disappear.

How to fix:
    ``torch.compile`` fuses such chains automatically; for a hand-written op consider a fused
    implementation (``F.scaled_dot_product_attention``, fused optimizers with ``fused=True``
    or ``foreach=True``, fused layer norms).

Example:
    Before::

        y = x * torch.sigmoid(x)        # two kernels, two passes over memory

    After::

        y = F.silu(x)                    # one kernel; or torch.compile the module
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule


@rule(
    slug="fusion-candidates",
    code="ADV110",
    layer=Layer.MODEL,
    needs=("trace",),
    severity=Severity.LOW,
    thresholds={
        "short_kernel_us": Threshold(20, "a kernel shorter than this is a fusion candidate", "µs"),
        "min_kernels": Threshold(2, "short kernels in one op's sequence", "count"),
        "min_per_step": Threshold(4, "times a sequence repeats per step before it is reported", "count"),
        "min_share": Threshold(0.02, "share of the step in the reported sequences"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if trace is None or not trace.kernels:
        yield Clean(why="no GPU kernels in this run: it looks for ops launching runs of short kernels")
        return
    by_op: dict[int, list] = defaultdict(list)
    for kernel in trace.kernels:
        if trace.steps and kernel.step is None:
            continue
        op = trace.launching_op(kernel)
        if op is not None:
            by_op[trace.outermost(op).index].append(kernel)
    sequences: dict[tuple, list[tuple[int, list]]] = defaultdict(list)
    for op_index, kernels in by_op.items():
        kernels.sort(key=lambda k: k.ts)
        if len(kernels) >= th.min_kernels and all(k.dur < th.short_kernel_us for k in kernels):
            key = (trace.ops[op_index].name, tuple(_short_name(k.name) for k in kernels))
            sequences[key].append((op_index, kernels))
    steps = trace.step_count
    frequent = {key: found for key, found in sequences.items() if len(found) / steps >= th.min_per_step}
    if not frequent:
        yield Clean(why=f"no op launches {th.min_kernels:g}+ kernels shorter than {th.short_kernel_us:g} µs each, "
                        f"{th.min_per_step:g}+ times per step")
        return
    kernel_us = sum(k.dur for found in frequent.values() for _, ks in found for k in ks) / steps
    share = ev.share_of_step(kernel_us) if ev.step_ms else None
    if share is None and trace.steps:
        share = kernel_us / trace.mean_step_us()
    if share is not None:
        yield ev.share_margin("short fusable kernels' share of the step", share, th.min_share)
    if share is not None and share < th.min_share:
        return
    ranked = sorted(frequent.items(), key=lambda item: -len(item[1]))
    (op_name, names), found = ranked[0]
    unit = "per step" if trace.steps else "in the trace"
    yield Finding(
        message=(f"{len(ranked)} kernel sequence(s) of short kernels repeat under one CPU op; most often {op_name} "
                 f"launching {len(names)} kernels ({' -> '.join(names[:4])}{' ...' if len(names) > 4 else ''}), "
                 f"{len(found) / steps:g} times {unit}"),
        impact=share,
        evidence={"sequences": len(ranked), "kernels_per_step": sum(len(f) * len(k[1]) for k, f in ranked) / steps,
                  "kernel_ms_per_step": round(kernel_us / 1000, 4)},
        locations=[_location(trace, key, found, steps, unit) for key, found in ranked[:6]],
        fix=Fix(summary="torch.compile fuses such chains; or use a fused implementation of the op",
                docs=["https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html"]),
    )


def _short_name(name: str) -> str:
    return name.split("(")[0].split("<")[0].strip()[:60]


def _location(trace, key, found, steps, unit) -> Location:
    op_name, names = key
    op = trace.ops[found[0][0]]
    note = f"{len(found) / steps:g} times {unit}: {op_name} -> {len(names)} kernels"
    if op.src is not None:
        return Location.at(op.src.file, op.src.line, function=op_name, count_per_step=len(found) / steps, note=note)
    return Location(file="", line=0, function=op_name, count_per_step=len(found) / steps, note=note)
