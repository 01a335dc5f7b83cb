"""The GPU sits idle for a large share of each step.

What it detects:
    Per profiled step, the share of time no kernel, copy or memset runs on the GPU, at least
    ``min_idle_share``, split the way Holistic Trace Analysis does: *host wait* (the next
    kernel's launch had not even been issued when the GPU went idle: the CPU is the
    bottleneck), *kernel wait* (short gaps, under ``kernel_wait_us``, between back-to-back
    kernels: launch latency) and *other* (waits on syncs, copies, dependencies).

Why it matters:
    Idle GPU time is the upper bound of what every other optimization can win. Knowing whether
    the host or the launch path causes it says which fix applies: a slow CPU side (data
    loading, Python overhead, syncs) or too many small kernels.

How to fix:
    Host wait: move work off the critical path (data loader workers, fewer syncs,
    ``torch.compile``); kernel wait: fuse kernels or capture CUDA graphs
    (``torch.compile(mode="reduce-overhead")``); other: look for syncs and blocking copies.

Example:
    Before::

        for batch in loader:                 # num_workers=0: the GPU waits for each batch
            loss = model(batch.cuda()); ...

    After::

        loader = DataLoader(..., num_workers=8, pin_memory=True)
        model = torch.compile(model, mode="reduce-overhead")
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Margin, Severity, Threshold, Thresholds, rule
from advisor.trace.parse import Trace


@rule(
    slug="gpu-idle",
    code="ADV109",
    layer=Layer.APPLICATION,
    needs=("trace",),
    severity=Severity.MEDIUM,
    high_at="high_idle_share",
    thresholds={
        "min_idle_share": Threshold(0.3, "GPU idle share of the step before it is reported"),
        "kernel_wait_us": Threshold(50, "a gap shorter than this between kernels counts as launch latency", "µs"),
        "high_idle_share": Threshold(0.6, "idle share that makes it high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if trace is None or not trace.kernels or not trace.steps:
        # idle time needs step boundaries to be measured against
        yield Clean(why="no GPU kernels in this run" if trace is None or not trace.kernels else
                    "the trace marks no step to measure idle time against")
        return
    split = idle_split(trace, th.kernel_wait_us)
    step_us = sum(s.dur for s in trace.steps)
    idle = sum(split.values())
    share = idle / step_us if step_us else 0.0
    yield Margin(quantity="GPU idle share of the step", value=round(share, 4), threshold=th.min_idle_share, noise=0.0)
    if share < th.min_idle_share:
        return
    parts = {name: us / step_us for name, us in split.items()}
    main = max(parts, key=parts.get)
    advice = {
        "host wait": "the CPU side is the bottleneck: move data loading to workers, remove syncs, torch.compile",
        "kernel wait": "launch latency between small kernels: fuse them or capture CUDA graphs "
                       "(torch.compile(mode='reduce-overhead'))",
        "other": "look for synchronizations and blocking copies between kernels",
    }
    yield Finding(
        message=(f"the GPU is idle {share:.0%} of each step: host wait {parts['host wait']:.0%}, "
                 f"kernel wait {parts['kernel wait']:.0%}, other {parts['other']:.0%}; mostly {main}"),
        impact=share,
        evidence={"idle_share": round(share, 4), **{f"{k.replace(' ', '_')}_share": round(v, 4) for k, v in parts.items()},
                  "steps": len(trace.steps)},
        fix=Fix(summary=advice[main],
                docs=["https://hta.readthedocs.io/en/latest/source/features/idle_time_breakdown.html"]),
    )


def idle_split(trace: Trace, kernel_wait_us: float) -> dict[str, float]:
    """Idle µs inside the profiled steps, by cause."""
    split = {"host wait": 0.0, "kernel wait": 0.0, "other": 0.0}
    for step in trace.steps:
        _, gaps = trace.gpu_gaps(step)
        for start, end, next_event in gaps:
            launch = trace.launch_of(next_event) if next_event is not None else None
            if launch is not None and launch.ts >= start:
                split["host wait"] += end - start  # launched only after the GPU ran dry
            elif next_event is not None and end - start < kernel_wait_us:
                split["kernel wait"] += end - start
            else:
                split["other"] += end - start
    return split
