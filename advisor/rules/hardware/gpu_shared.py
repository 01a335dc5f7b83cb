"""Another process computes on the GPU this run measured on.

What it detects:
    Processes outside the measured job (its own ranks and loader workers excluded) holding a compute
    context on a GPU the run used, read as the timed window ended through NVML or ``nvidia-smi -q -x``.
    Silent where the device's process list cannot be read, or where its pids are of another namespace
    (a container) and the job's own cannot be told apart from others.

Why it matters:
    The GPU time-slices between contexts: another job's kernels run between this one's, its memory
    shrinks what this one may allocate, and every time measured here carries the neighbour's load. The
    profile of this run looks like idle gaps and slow kernels, with no cause in the model.

How to fix:
    Run on a GPU of its own: ``CUDA_VISIBLE_DEVICES`` to a free device (``nvidia-smi`` lists what runs
    where), the cluster scheduler's exclusive GPU allocation, or the device in exclusive-process compute
    mode (``nvidia-smi -c EXCLUSIVE_PROCESS``). Then measure again.

Example:
    Before::

        CUDA_VISIBLE_DEVICES=0 python train.py   # GPU 0 also runs a colleague's notebook

    After::

        CUDA_VISIBLE_DEVICES=3 python train.py   # a GPU nothing else uses
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.helpers import NO_GPU_READ
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Thresholds, rule

DOCS = ["https://docs.nvidia.com/deploy/mps/index.html#topic_3_3_1_1"]


@rule(
    slug="gpu-shared",
    code="ADV142",
    layer=Layer.HARDWARE,
    needs=("cuda", "conditions"),
    severity=Severity.MEDIUM,
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    gpus = ev.timing.conditions.gpus
    if not any(gpu.others for gpu in gpus):
        yield Clean(why="no other process used the GPU while the step was timed" if gpus else NO_GPU_READ)
    for gpu in gpus:
        if not gpu.others:
            continue
        named = ", ".join(f"{p.command or '?'} (pid {p.pid}" + (f", {p.memory_mb:.0f} MiB)" if p.memory_mb else ")")
                          for p in gpu.others)
        yield Finding(
            severity=Severity.MEDIUM,
            message=(f"GPU {gpu.index} ({gpu.name}) was shared while the step was timed: {len(gpu.others)} other "
                     f"process(es) held a compute context on it, {named}; their kernels run between this run's"),
            evidence={"gpu": gpu.index, "others": [p.model_dump() for p in gpu.others], "read_by": gpu.source},
            fix=Fix(summary="a GPU of its own (CUDA_VISIBLE_DEVICES to a free one, an exclusive allocation, or "
                            "EXCLUSIVE_PROCESS compute mode), then measure again", docs=DOCS),
        )


check.advice_only("the other processes are the machine's, not the model's")
