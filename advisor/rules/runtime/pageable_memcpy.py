"""Host-device copies to or from pageable (unpinned) memory.

What it detects:
    In a GPU trace, "Memcpy HtoD (Pageable -> Device)" and "Memcpy DtoH (Device -> Pageable)"
    copies: their count, bytes and time per step, and the CPU op (and source line, when the
    trace has one) that issued each.

Why it matters:
    The GPU's copy engines can only read and write page-locked memory. A pageable copy is
    staged by the driver through a pinned bounce buffer, synchronously: it runs at a fraction
    of the bus bandwidth and cannot overlap with compute, so the GPU and the host both wait.

How to fix:
    Allocate host buffers pinned (``DataLoader(pin_memory=True)``, ``tensor.pin_memory()``,
    ``torch.empty(..., pin_memory=True)``) and copy with ``non_blocking=True``; for results,
    copy into a pinned buffer and read it after a later synchronization point.

Example:
    Before::

        x = batch.to("cuda")

    After::

        x = batch.pin_memory().to("cuda", non_blocking=True)   # or DataLoader(pin_memory=True)
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Margin, Severity, Threshold, Thresholds, rule

PAGEABLE = ("Pageable -> Device", "Device -> Pageable")


@rule(
    slug="pageable-memcpy",
    code="ADV107",
    layer=Layer.RUNTIME,
    needs=("trace",),
    severity=Severity.MEDIUM,
    high_at="high_share",
    thresholds={
        "min_per_step": Threshold(1, "pageable copies per step before it is reported", "count"),
        "high_share": Threshold(0.05, "share of the step in pageable copies that makes it high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if trace is None or not trace.memcpy:
        yield Clean(why="no host-device copies in the trace" + ("" if ev.on_cuda else " (no GPU in this run)"))
        return
    copies = [m for m in trace.memcpy if any(p in m.name for p in PAGEABLE) and (m.step is not None or not trace.steps)]
    per_step = len(copies) / trace.step_count
    yield Margin(quantity="pageable copies per step", value=round(per_step, 4), threshold=th.min_per_step, noise=0.0)
    if per_step < th.min_per_step:
        return
    by_place: dict[tuple[str, int, str], list] = defaultdict(list)
    for copy in copies:
        by_place[trace.place(trace.launching_op(copy), fallback=copy.name)].append(copy)
    ms_per_step = trace.median_per_step(copies) / 1000 if trace.steps else sum(c.dur for c in copies) / 1000
    total_bytes = sum(c.bytes for c in copies)
    share = ev.share_of_step(ms_per_step * 1000)
    unit = "per step" if trace.steps else "in the trace"
    directions = sorted({"host to device" if "HtoD" in c.name else "device to host" for c in copies})
    yield Finding(
        message=(f"{per_step:g} copies {unit} between the GPU and pageable host memory ({' and '.join(directions)}), "
                 f"{total_bytes / trace.step_count / 2**20:.3g} MB and {ms_per_step:.3g} ms {unit}"),
        impact=share,
        evidence={"copies_per_step": per_step, "mb_per_step": round(total_bytes / trace.step_count / 2**20, 4),
                  "ms_per_step": round(ms_per_step, 4), "directions": directions},
        locations=[
            Location.at(file, line, function=op_name, count_per_step=len(group) / trace.step_count,
                        note=f"{len(group) / trace.step_count:g} pageable copies {unit} under {op_name}")
            for (file, line, op_name), group in sorted(by_place.items(), key=lambda item: -len(item[1]))[:6]
        ],
        fix=Fix(summary="pin the host memory (DataLoader(pin_memory=True), tensor.pin_memory()) and copy with "
                        "non_blocking=True",
                docs=["https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html"]),
    )
