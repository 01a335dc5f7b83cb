"""Batches are copied to the GPU from pageable (unpinned) host memory.

What it detects:
    A data loader with ``pin_memory=False`` feeding a CUDA step, and in the trace the copies
    it causes: "Memcpy HtoD (Pageable -> Device)" events. On a CPU-only audit it reports, at
    info level, loaders whose batches are at least ``min_batch_mb`` MB: the advice applies
    when the same code trains on CUDA.

Why it matters:
    The GPU's DMA engine can only read page-locked memory: a copy from pageable memory is
    staged through a pinned bounce buffer by the driver, synchronously, so it cannot overlap
    with compute and runs at a fraction of the bus bandwidth. Pinned batches copied with
    ``non_blocking=True`` overlap the transfer with the previous step.

How to fix:
    ``DataLoader(..., pin_memory=True)`` and move batches with ``.to(device, non_blocking=True)``.

Example:
    Before::

        loader = DataLoader(ds, batch_size=64)
        x = x.to("cuda")

    After::

        loader = DataLoader(ds, batch_size=64, pin_memory=True)
        x = x.to("cuda", non_blocking=True)
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.common_sites import at_loader_call
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Margin, Severity, Threshold, Thresholds, rule

DOCS = ["https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
        "https://pytorch.org/docs/stable/data.html#memory-pinning"]
PAGEABLE_TO_DEVICE = "Pageable -> Device"


@rule(
    slug="dataloader-pin-memory",
    code="ADV106",
    layer=Layer.APPLICATION,
    needs=("data",),
    severity=Severity.MEDIUM,
    thresholds={"min_batch_mb": Threshold(1.0, "batch size below which pinning hardly matters (CPU audits)", "MB")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    data = ev.data
    if data is None or data.pin_memory:
        yield Clean(why="no data loader was measured" if data is None else "the loader pins its batches already")
        return
    batch_mb = (data.batch_bytes or 0) / 2**20
    location = data.places()
    fix = Fix(
        summary="DataLoader(..., pin_memory=True) and batch.to(device, non_blocking=True)",
        before=f"DataLoader(dataset, batch_size={data.batch_size})\nx = x.to('cuda')",
        after=f"DataLoader(dataset, batch_size={data.batch_size}, pin_memory=True)\nx = x.to('cuda', non_blocking=True)",
        docs=DOCS,
    )
    if ev.on_cuda:
        pageable = _pageable_copies(ev)
        yield Finding(
            severity=Severity.MEDIUM,
            message=(f"the loader's {batch_mb:.3g} MB batches are not pinned (pin_memory=False)"
                     + (f"; {pageable['per_step']:g} pageable host-to-device copies per step, "
                        f"{pageable['ms_per_step']:.3g} ms" if pageable["count"] else "")
                     + ": copies run synchronously through a staging buffer"),
            impact=pageable["ms_per_step"] / ev.step_ms if (pageable["count"] and ev.step_ms) else None,
            evidence={"pin_memory": False, "batch_mb": round(batch_mb, 3), **pageable},
            locations=location,
            fix=fix,
        )
        return
    if batch_mb < th.min_batch_mb:  # small batches: pinning would not be measurable even on a GPU
        yield Margin(quantity="batch size (MB)", value=round(batch_mb, 4), threshold=th.min_batch_mb, noise=0.0)
        return
    yield Finding(
        severity=Severity.INFO,
        message=(f"pin_memory=False with {batch_mb:.3g} MB batches: no effect on this CPU-only run, but when "
                 "this trains on CUDA, pinned batches copied with non_blocking=True overlap the transfer with compute"),
        evidence={"pin_memory": False, "batch_mb": round(batch_mb, 3), "device": ev.target.device},
        locations=location,
        fix=fix,
    )


def _pageable_copies(ev: Evidence) -> dict:
    if ev.trace is None:
        return {"count": 0, "per_step": 0.0, "ms_per_step": 0.0}
    copies = [m for m in ev.trace.memcpy if PAGEABLE_TO_DEVICE in m.name and (m.step is not None or not ev.trace.steps)]
    steps = ev.trace.step_count
    return {"count": len(copies), "per_step": len(copies) / steps,
            "ms_per_step": round(sum(m.dur for m in copies) / steps / 1000, 4)}


@check.fix(what="pinned batches, copied with non_blocking=True",
           needs_cuda="pinned memory only changes host-to-GPU copies")
def fix(target, finding):
    """Rebuild the loader with pin_memory=True (measurable only with a CUDA device)."""
    return replace_target(target, loader_options={**target.loader_options, "pin_memory": True})


@check.patch(what="pin_memory=True at the DataLoader(...) call", through_loader=True)
def patch(files, finding):
    """The loader's pin_memory set where the audit saw it created (the copies' non_blocking=True is the
    user's to add where the batch moves to the GPU)."""
    return at_loader_call(files, finding, pin_memory=True)
