"""DDP gradient buckets too small, or communication left exposed after backward.

What it detects:
    A DistributedDataParallel model (a torchrun job under ``advisor run``) whose gradients go
    out in many small all-reduces — more than ``max_buckets`` buckets averaging under
    ``min_bucket_mb`` — or whose gradients, larger than the default bucket cap, go out in one or
    two buckets that barely overlap backward compute (DDP's own timing: under
    ``min_overlap_share`` of the communication), while communication takes at least
    ``min_comm_share`` of the step. (A small model's gradients fill one bucket at the end of
    backward whatever the cap: no bucket size helps it, so it is not reported.)

Why it matters:
    Each all-reduce pays a fixed latency (a handshake between ranks, a kernel or a gloo round):
    many small ones cost more than a few large ones. Buckets are all-reduced while backward
    still computes the earlier layers; a bucket that fills only at the end of backward (the
    last one) is communication every rank waits for.

How to fix:
    Raise ``bucket_cap_mb`` (default 25) so the gradients form a few buckets, sized from the
    model's gradient bytes; set ``gradient_as_bucket_view=True`` so gradients live in the
    buckets (no copy in and out, less memory).

Example:
    Before::

        model = DistributedDataParallel(net, bucket_cap_mb=1)

    After::

        model = DistributedDataParallel(net, bucket_cap_mb=25, gradient_as_bucket_view=True)
"""

from __future__ import annotations

import math
from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.common_sites import at_ddp_call
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule

MB = 2**20
DEFAULT_CAP_MB = 25


@rule(
    slug="ddp-buckets",
    code="ADV136",
    layer=Layer.APPLICATION,
    needs=("ddp",),
    severity=Severity.MEDIUM,
    thresholds={
        "max_buckets": Threshold(3, "buckets per backward before they count as many"),
        "min_bucket_mb": Threshold(4.0, "mean bucket size below which buckets are small", "MB"),
        "min_overlap_share": Threshold(0.3, "share of backward communication overlapped with compute"),
        "min_comm_share": Threshold(0.05, "share of the step in backward communication"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    ddp = ev.ddp
    if ddp is None or ddp.world_size < 2 or not ddp.bucket_bytes or not ddp.backward_comm_ms or not ev.step_ms:
        yield Clean(why="no DistributedDataParallel model across two or more ranks" if ddp is None or ddp.world_size < 2
                    else "DDP's bucket communication was not measured")
        return
    comm_ms = ddp.backward_comm_ms * max(ddp.synced_forwards_per_step, 1.0)
    comm_share = min(1.0, comm_ms / ev.step_ms)
    yield ev.share_margin("gradient communication's share of the step", comm_share, th.min_comm_share)
    if comm_share < th.min_comm_share:
        return
    buckets = len(ddp.bucket_bytes)
    mean_mb = sum(ddp.bucket_bytes) / buckets / MB
    small = buckets > th.max_buckets and mean_mb < th.min_bucket_mb
    overlap = (ddp.backward_overlap_ms or 0.0) / ddp.backward_comm_ms
    exposed = overlap < th.min_overlap_share
    gradient_mb = ddp.parameter_bytes / MB
    exposed = exposed and buckets <= 2 and gradient_mb > DEFAULT_CAP_MB  # splitting can let buckets overlap
    if not small and not exposed:
        yield Clean(why=f"{buckets} bucket(s) of {mean_mb:.3g} MB on average, overlapping the backward")
        return
    # a few buckets that still overlap with backward: the default cap, or a quarter of the gradients when larger
    suggested = max(DEFAULT_CAP_MB, math.ceil(gradient_mb / 4)) if small else math.ceil(gradient_mb / 4)
    why = []
    if small:
        why.append(f"{buckets} buckets of {mean_mb:.2g} MB on average (bucket_cap_mb={ddp.bucket_cap_bytes / MB:g}) "
                   f"for {gradient_mb:.3g} MB of gradients: {buckets} all-reduces per backward")
    if exposed:
        why.append(f"{gradient_mb:.3g} MB of gradients go out in {buckets} bucket(s), only {overlap:.0%} of the "
                   "backward communication overlapping backward compute")
    advice = [f"bucket_cap_mb={suggested}"] + ([] if ddp.gradient_as_bucket_view else ["gradient_as_bucket_view=True"])
    yield Finding(
        message=f"{'; '.join(why)}; backward communication takes {comm_ms:.3g} ms of the {ev.step_ms:.3g} ms step",
        impact=None,  # the gain is a part of the communication time, which verification measures
        evidence={"buckets": buckets, "mean_bucket_mb": round(mean_mb, 3), "bucket_cap_mb": ddp.bucket_cap_bytes / MB,
                  "gradient_mb": round(gradient_mb, 3), "overlap_share": round(overlap, 4),
                  "comm_share_of_step": round(comm_share, 4), "suggested_bucket_cap_mb": suggested},
        locations=[Location.at(ddp.file, ddp.line)] if ddp.file else [],
        fix=Fix(summary="build DDP with " + ", ".join(advice),
                before="model = DistributedDataParallel(net, bucket_cap_mb=1)",
                after=f"model = DistributedDataParallel(net, {', '.join(advice)})",
                docs=["https://pytorch.org/docs/stable/notes/ddp.html",
                      "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html"]),
    )


@check.fix(tolerance=1e-5, what="larger DDP buckets, gradients as bucket views")
def fix(target, finding):
    """The same gradients, all-reduced in fewer, larger buckets (sums may reorder: 1e-5)."""
    return replace_target(target, ddp_options={**target.ddp_options, **_options(finding)})


def _options(finding):
    return {"gradient_as_bucket_view": True, "bucket_cap_mb": finding.evidence["suggested_bucket_cap_mb"]}


@check.patch(what="bucket_cap_mb and gradient_as_bucket_view at the DistributedDataParallel(...) call")
def patch(files, finding):
    return at_ddp_call(files, finding, **_options(finding))
