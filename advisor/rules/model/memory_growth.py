"""The memory a step holds grows from step to step.

What it detects:
    The tensor memory Python reaches at the end of each step (parameters, gradients and the optimizer's state left
    out), over the steps the memory stage measured, that rises every step by at least ``min_bytes``; the line that
    made the tensors the first step made and the last left alive is where it points.

Why it matters:
    A step that keeps some of its tensors (a prediction kept with its autograd graph, a list of losses as tensors,
    a cache keyed by something that never repeats) holds more memory each step until the run fails with an
    out-of-memory error hours in, and the growing heap slows the allocator and the garbage collector on the way.

How to fix:
    Keep what outlives the step as plain numbers or detached copies (``loss.item()``, ``y.detach()``; on a GPU
    ``.cpu()`` of a detached tensor), bound any cache, and drop references to old steps' tensors.

Example:
    Before::

        self.seen.append(y)  # keeps y, and its graph, every step

    After::

        self.seen.append(y.detach().mean().item())
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Margin, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label


@rule(
    slug="memory-growth",
    code="ADV147",
    layer=Layer.MODEL,
    needs=("memory",),
    severity=Severity.MEDIUM,
    thresholds={"min_bytes": Threshold(64 * 1024, "growth of live tensor memory per step, in bytes")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    memory = ev.memory
    ends = memory.step_end_bytes
    rising = len(ends) >= 2 and all(later > earlier for earlier, later in zip(ends, ends[1:]))
    growth = memory.growth_bytes_per_step if rising else 0.0
    yield Margin(quantity="growth of live tensor memory per step, bytes", value=round(growth), threshold=th.min_bytes,
                 noise=0.0)
    if growth < th.min_bytes:
        yield Clean(why=f"live tensor memory at the {len(ends)} measured steps' ends: "
                        + ", ".join(f"{end / 2**20:.3g} MB" for end in ends))
        return
    held = memory.held[0] if memory.held else None
    where = (f"; {held.tensors} tensor(s), {held.bytes / 2**20:.3g} MB, made at {site_label(held.file, held.line)} in the "
             "first step were still alive after the last" if held else "")
    yield Finding(
        message=(f"the tensor memory the step leaves behind grows {growth / 2**20:.3g} MB every step ({memory.steps} measured steps: "
                 + " -> ".join(f"{end / 2**20:.3g}" for end in ends) + f" MB){where}"),
        evidence={"growth_bytes_per_step": round(growth), "step_end_bytes": ends,
                  "held": [h.model_dump() for h in memory.held]},
        locations=[Location.at(h.file, h.line, note=f"{h.bytes / 2**20:.3g} MB a step outlive it")
                   for h in memory.held[:3] if h.file],
        fix=Fix(summary="keep what outlives the step as plain numbers or detached copies (y.detach(), loss.item()); "
                        "bound caches",
                before="self.seen.append(y)", after="self.seen.append(y.detach().mean().item())",
                docs=["https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory",
                      "https://pytorch.org/blog/understanding-gpu-memory-1/"]),
    )
