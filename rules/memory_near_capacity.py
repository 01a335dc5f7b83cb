"""The step's peak memory is close to what the device (or the process) can hold.

What it detects:
    The step's peak memory (the CUDA caching allocator's peak, or on a CPU the tensors accounted by kind) at or above
    ``min_share`` of the capacity: the GPU's memory, or on a CPU the memory the process holds and could still get
    (the host's available RAM, or the cgroup's memory limit where one binds). The kind that holds most of the
    peak decides the advice.

Why it matters:
    A step near its device's capacity fails with an out-of-memory error on the first longer sequence or larger
    batch, runs with no room for a larger batch (throughput left on the table), and on a GPU makes the caching
    allocator free and re-split blocks (``cudaFree`` stalls, fragmentation) every step.

How to fix:
    Activations: recompute them in the backward (``torch.utils.checkpoint`` around the repeated blocks) or halve
    them with bf16 autocast. Optimizer state: a lighter optimizer (Adafactor, 8-bit Adam), or shard it across
    ranks (ZeRO, FSDP). Parameters: keep them in bf16, or shard them (FSDP).

Example:
    Before::

        x = block(x)

    After::

        x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Margin, Severity, Threshold, Thresholds, rule

ADVICE = {
    "activations": "recompute activations in the backward (torch.utils.checkpoint around the repeated blocks) or "
                   "halve them with bf16 autocast",
    "temporaries": "free what the step keeps between operators (del large intermediates), or bf16 autocast",
    "optimizer state": "a lighter optimizer (Adafactor, 8-bit Adam) or its state sharded across ranks (ZeRO, FSDP)",
    "parameters": "parameters in bf16, or sharded across ranks (FSDP)",
    "gradients": "gradients in bf16, or sharded across ranks (FSDP, ZeRO-2)",
}


@rule(
    slug="memory-near-capacity",
    code="ADV148",
    layer=Layer.MODEL,
    needs=("memory",),
    severity=Severity.MEDIUM,
    thresholds={"min_share": Threshold(0.8, "peak tensor memory over the capacity"),
                "high_share": Threshold(0.9, "share at which the finding is high")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    memory = ev.memory
    share = memory.peak_share
    if share is None:
        yield Clean(why="the capacity of the device could not be read")
        return
    yield Margin(quantity="peak tensor memory over the capacity", value=round(share, 4), threshold=th.min_share, noise=0.0)
    if share < th.min_share:
        return
    kind, held = max(memory.kinds.items(), key=lambda item: item[1])
    yield Finding(
        severity=Severity.HIGH if share >= th.high_share else Severity.MEDIUM,
        message=(f"the step's peak holds {memory.peak_bytes / 2**30:.3g} GB of the {memory.capacity_bytes / 2**30:.3g} GB "
                 f"{memory.capacity_kind} ({share:.0%}); {kind} hold {held / 2**30:.3g} GB of it "
                 f"({held / memory.peak_bytes:.0%}): no room for a larger batch or a longer input"),
        impact=None,
        evidence={"peak_bytes": memory.peak_bytes, "capacity_bytes": memory.capacity_bytes, "share": round(share, 4),
                  "kinds": memory.kinds, "largest_kind": kind},
        fix=Fix(summary=ADVICE.get(kind, "find what holds the peak (the memory table) and shrink it"),
                before="x = block(x)", after="x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)",
                docs=["https://pytorch.org/docs/stable/checkpoint.html",
                      "https://pytorch.org/blog/understanding-gpu-memory-1/"]),
    )
