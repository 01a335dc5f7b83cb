"""Gradient accumulation that all-reduces on every micro-step.

What it detects:
    A DistributedDataParallel model (a torchrun job under ``advisor run``) that runs several
    forward/backward passes per optimizer step (gradient accumulation) and all-reduces the
    gradients on every one of them: no ``model.no_sync()`` around the micro-steps before the
    last. At least ``min_micro_steps`` forwards per optimizer step, and the ones outside
    ``no_sync`` at least ``min_synced_share`` of them.

Why it matters:
    Only the gradients summed over all micro-steps are used by the optimizer. All-reducing each
    micro-step's partial sum sends (accum - 1) / accum of the gradient traffic for nothing, and
    every rank waits for the slowest at each of them instead of once per step.

How to fix:
    Wrap every micro-step but the last in ``with model.no_sync():``; gradients accumulate
    locally and the last backward all-reduces their sum.

Example:
    Before::

        for micro in range(accum):
            loss_fn(model(x[micro]), y[micro]).backward()
        optimizer.step()

    After::

        for micro in range(accum):
            context = model.no_sync() if micro < accum - 1 else contextlib.nullcontext()
            with context:
                loss_fn(model(x[micro]), y[micro]).backward()
        optimizer.step()
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.common_sites import no_sync_loop
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule


@rule(
    slug="no-sync-accumulation",
    code="ADV135",
    layer=Layer.APPLICATION,
    needs=("ddp",),
    severity=Severity.HIGH,
    high_at="high_share",
    thresholds={
        "min_micro_steps": Threshold(2, "forward passes per optimizer step that make it accumulation"),
        "min_synced_share": Threshold(0.75, "share of those micro-steps that all-reduce"),
        "high_share": Threshold(0.1, "share of the step the extra all-reduces cost that makes it high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    ddp = ev.ddp
    if ddp is None or ddp.world_size < 2 or ddp.forwards_per_step < th.min_micro_steps - 0.01:
        yield Clean(why="no DistributedDataParallel model across two or more ranks" if ddp is None or ddp.world_size < 2
                    else f"no gradient accumulation: {ddp.forwards_per_step:g} forward(s) per optimizer step")
        return
    accum = round(ddp.forwards_per_step)
    if ddp.synced_forwards_per_step / ddp.forwards_per_step < th.min_synced_share:
        yield Clean(why="no_sync() is used on the micro-steps already")
        return
    wasted = (accum - 1) / accum
    comm_ms = ddp.backward_comm_ms * ddp.synced_forwards_per_step if ddp.backward_comm_ms else None
    share = min(1.0, comm_ms / ev.step_ms) if comm_ms and ev.step_ms else None
    impact = round(wasted * share, 4) if share is not None else None
    yield Finding(
        message=(f"{accum} micro-steps per optimizer step each all-reduce their gradients "
                 f"({ddp.synced_forwards_per_step:g} of {ddp.forwards_per_step:g} forwards outside no_sync): "
                 f"{wasted:.0%} of the gradient traffic is sent for nothing"
                 + (f"; communication takes {comm_ms:.3g} ms of the {ev.step_ms:.3g} ms step" if comm_ms else "")),
        impact=impact,
        evidence={"micro_steps": accum, "synced_per_step": ddp.synced_forwards_per_step,
                  "wasted_traffic_share": round(wasted, 4), "comm_ms_per_step": comm_ms},
        locations=[Location.at(ddp.forward_file, ddp.forward_line, note="each micro-step's forward, outside no_sync")]
        if ddp.forward_file else [],
        fix=Fix(summary=f"wrap the first {accum - 1} micro-steps of each step in `with model.no_sync():`",
                docs=["https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html"
                      "#torch.nn.parallel.DistributedDataParallel.no_sync"]),
    )


@check.fix(tolerance=1e-5, what="no_sync on all micro-steps but the last")
def fix(target, finding):
    """The same summed gradients, all-reduced once per optimizer step (float sums reorder: 1e-5)."""
    return replace_target(target, ddp_sync_every=int(finding.evidence["micro_steps"]))


@check.patch(what="model.no_sync() on every micro-step but the last")
def patch(files, finding):
    """The ``for i in range(n):`` micro-step loop around the forward, its body under ``model.no_sync()`` but on
    its last iteration. A loop of another shape (a counter over a loader) is left to the user."""
    return no_sync_loop(files, finding)

