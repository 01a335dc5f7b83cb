"""torch.cuda.empty_cache() called inside the step.

What it detects:
    A call of ``torch.cuda.empty_cache()`` from user code while the audited step runs (seen
    by watching the step's calls, so code that never runs is not reported).

Why it matters:
    PyTorch's caching allocator keeps freed GPU memory to hand it out again without asking
    the driver. ``empty_cache()`` returns all of it: it synchronizes the device, calls
    ``cudaFree`` on every cached block, and the next step pays ``cudaMalloc`` again for every
    tensor — both slow, synchronous driver calls. It does not make more memory available to
    PyTorch itself; it only helps other processes sharing the GPU.

How to fix:
    Remove the call from the step. If memory runs out, find what holds it (a growing list of
    tensors with history, activations kept for logging) or set
    ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` against fragmentation.

Example:
    Before::

        loss.backward()
        torch.cuda.empty_cache()

    After::

        loss.backward()
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.common_sites import at_call_sites
from advisor.rulekit.fixing import silenced, with_switches
from advisor.rulekit.helpers import no_calls
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Thresholds, rule

API = "torch.cuda.empty_cache"


@rule(slug="empty-cache", code="ADV130", layer=Layer.APPLICATION, severity=Severity.HIGH)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    sites = ev.call_sites(API, runtime=True)
    if not sites:
        yield Clean(why=no_calls(ev, "torch.cuda.empty_cache()"))
        return
    calls = sum(site.count for site in sites)
    yield Finding(
        severity=Severity.HIGH if ev.on_cuda else Severity.LOW,
        message=(f"torch.cuda.empty_cache() runs {calls} time(s) per step"
                 + (": each call synchronizes the GPU and frees the allocator's cache, so the next step "
                    "pays cudaMalloc again" if ev.on_cuda else
                    f"; on this {ev.target.device} run it does nothing, but on a GPU each call synchronizes "
                    "and frees the allocator's cache, so every step pays cudaMalloc again")),
        evidence={"calls_per_step": calls, "device": ev.target.device},
        locations=[Location.at(s.file, s.line, count_per_step=s.count) for s in sites],
        fix=Fix(summary="remove torch.cuda.empty_cache() from the step (for fragmentation: "
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
                docs=["https://pytorch.org/docs/stable/notes/cuda.html#memory-management"]),
    )


@check.fix(tolerance=1e-6, what="empty_cache() removed", needs_cuda="empty_cache() does nothing without CUDA; "
           "its cost appears only on a GPU")
def fix(target, finding):
    """Run the step with empty_cache() doing nothing: the same math, the cache kept."""
    import torch

    return with_switches(target, silenced(torch.cuda, "empty_cache"))


@check.patch(what="torch.cuda.empty_cache() removed from the step")
def patch(files, finding):
    """Each ``torch.cuda.empty_cache()`` statement the finding names, removed."""
    return at_call_sites(files, finding, "empty_cache", lambda source, call: source.remove_statement(call))
