"""Blocking host-device copies inside the step.

What it detects:
    Copies that make the host wait until they finish: ``cudaMemcpy`` / ``hipMemcpy`` and
    ``hipMemcpyWithStream``, and PyTorch's blocking copy pattern — ``cudaMemcpyAsync``
    followed by a stream synchronize inside the same CPU op (what ``.to(device)`` and
    ``.cpu()`` do without ``non_blocking=True``). Counted per step, with the op that issued
    them and the time the host spent blocked.

Why it matters:
    While the host waits for a copy, it launches nothing: the GPU drains its queue and idles
    after the copy too. A blocking copy per batch or per layer serializes host and device.

How to fix:
    Copy from pinned memory with ``non_blocking=True`` and let the next kernel on the same
    stream order itself after the copy; read device results on the host only where needed.

Example:
    Before::

        x = x.to("cuda")                       # cudaMemcpyAsync + cudaStreamSynchronize

    After::

        x = x.pin_memory().to("cuda", non_blocking=True)
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import ASYNC_COPIES, BLOCKING_COPIES
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Margin, Severity, Threshold, Thresholds, rule
from advisor.trace.parse import SYNC_RUNTIME_CALLS


@rule(
    slug="sync-memcpy",
    code="ADV108",
    layer=Layer.RUNTIME,
    needs=("trace",),
    severity=Severity.MEDIUM,
    thresholds={"min_per_step": Threshold(1, "blocking copies per step before it is reported", "count")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if trace is None or not trace.runtime:
        yield Clean(why="no CUDA runtime calls in the trace" + ("" if ev.on_cuda else " (no GPU in this run)"))
        return
    in_step = [r for r in trace.runtime if r.step is not None or not trace.steps]
    blocking = []  # (runtime call, enclosing op, blocked µs)
    syncs_by_op: dict[int, list] = defaultdict(list)
    for call in in_step:
        if call.name in SYNC_RUNTIME_CALLS:
            op = trace.enclosing_op(call.tid, call.ts)
            if op is not None:
                syncs_by_op[op.index].append(call)
    for call in in_step:
        if call.name not in BLOCKING_COPIES and call.name not in ASYNC_COPIES:
            continue
        op = trace.enclosing_op(call.tid, call.ts)
        if call.name in BLOCKING_COPIES:
            blocking.append((call, op, call.dur))
        elif call.name in ASYNC_COPIES and op is not None:
            waits = [s for s in syncs_by_op.get(op.index, []) if s.ts >= call.ts]
            if waits:
                blocking.append((call, op, call.dur + waits[0].dur))
    per_step = len(blocking) / trace.step_count
    yield Margin(quantity="blocking copies per step", value=round(per_step, 4), threshold=th.min_per_step, noise=0.0)
    if per_step < th.min_per_step:
        return
    unit = "per step" if trace.steps else "in the trace"
    blocked_ms = sum(us for _, _, us in blocking) / trace.step_count / 1000
    places: dict[tuple[str, int, str], int] = defaultdict(int)
    for call, op, _ in blocking:
        places[trace.place(op, fallback=call.name)] += 1
    share = ev.share_of_step(blocked_ms * 1000)
    yield Finding(
        severity=Severity.MEDIUM,
        message=f"{per_step:g} blocking host-device copies {unit}; the host waited {blocked_ms:.3g} ms {unit} for them",
        impact=share,
        evidence={"blocking_copies_per_step": per_step, "blocked_ms_per_step": round(blocked_ms, 4)},
        locations=[
            Location.at(file, line, function=name, count_per_step=count / trace.step_count,
                        note=f"{count / trace.step_count:g} blocking copies {unit} under {name}")
            for (file, line, name), count in sorted(places.items(), key=lambda item: -item[1])[:6]
        ],
        fix=Fix(summary="copy from pinned memory with non_blocking=True; avoid reading device values on the host "
                        "inside the step",
                docs=["https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html"]),
    )
