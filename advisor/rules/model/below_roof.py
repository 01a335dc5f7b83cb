"""Attention that runs far below what this machine's matmuls reach, because its heads are too narrow.

What it detects:
    An attention operator group (fused attention, or the batched matmuls of attention computed by hand, at one
    line, its backward apart) holding at least ``min_share`` of the profiled step whose achieved FLOP/s is under
    ``max_efficiency`` of its roof: the lesser of the machine's measured matmul peak for its dtype and its
    arithmetic intensity times the measured bandwidth (the audit measures both once per machine). It fires only
    where the shapes explain the shortfall and the model's design can change it: attention heads, fused or
    computed by hand as batched matmuls, that contract over fewer than ``narrow`` dimensions. A narrow input or
    output layer (8 features in, 1 out), the first convolution's 3 channels and a depthwise convolution are what
    their data and design are, not a shape to change for speed, and are left alone; so is a shortfall the shapes
    do not explain.

Why it matters:
    A matmul unit is fed by its inner dimension: with four multiply-adds per output it spends its time loading
    and storing, so the same FLOPs in a wider shape run several times faster. The work is there to be done; the
    shape decides how well the machine does it.

How to fix:
    Give each head a wide inner dimension: fewer, wider attention heads (64 dimensions or more per head, the same
    model width and FLOPs). On this machine, attention over 2 x 32 heads of 4 dimensions took 1.9 ms, over
    2 x 2 heads of 64 dimensions 0.32 ms.

Example:
    Before::

        heads = 32  # of 4 dimensions each, width 128

    After::

        heads = 2   # of 64 dimensions each, the same width and FLOPs
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import BATCHED_MATMULS, ROOF_ATTENTION, ROOF_ATTENTION_BACKWARD, TRACE_BIAS_FIRST
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label
from advisor.trace.roofline import OperatorRate, operator_rates


@rule(
    slug="below-roof",
    code="ADV146",
    layer=Layer.MODEL,
    needs=("trace", "peaks"),
    severity=Severity.LOW,
    thresholds={
        "min_share": Threshold(0.1, "share of the profiled step the operator group holds"),
        "max_efficiency": Threshold(0.25, "achieved rate over the roof at its intensity below which it is far below"),
        "narrow": Threshold(16, "a product's dimension below which its inner loop starves", "elements"),
        "medium_share": Threshold(0.3, "share at which the finding is medium"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    rates = [r for r in operator_rates(ev.trace, ev.peaks) if r.flops_per_step > 0 and r.share_of_step >=
    th.min_share
             and (r.op in BATCHED_MATMULS or r.op in ROOF_ATTENTION or r.op in ROOF_ATTENTION_BACKWARD)]
    low = [r for r in rates if r.efficiency < th.max_efficiency]
    lowest = min((r.efficiency for r in rates), default=1.0)
    yield ev.share_margin("the lowest efficiency of an attention operator holding a share of the step", lowest,
                          th.max_efficiency)
    explained = [(rate, cause) for rate in low if (cause := _narrow(rate, int(th.narrow)))]
    if not explained:
        yield Clean(why=f"{len(low)} attention operator group(s) below {th.max_efficiency:.0%} of the roof, none with "
                        "narrow heads to explain it" if low else "no attention operator group far below its roof")
        return
    for rate, (cause, fix) in explained:
        where = site_label(rate.file, rate.line) if rate.file else "an unattributed operator"
        yield Finding(
            severity=Severity.MEDIUM if rate.share_of_step >= th.medium_share else Severity.LOW,
            message=(f"{rate.op}{' (backward)' if rate.backward else ''} at {where} runs at {rate.efficiency:.0%} of this "
                     f"machine's roof for it ({rate.achieved_flops_per_s / 1e9:.3g} GFLOP/s against "
                     f"{(rate.roof_flops_per_s or 0) / 1e9:.3g} at {rate.intensity or 0:.3g} FLOP/byte in "
                     f"{rate.dtype or 'its dtype'}), {rate.share_of_step:.0%} of the step: {cause}"),
            impact=rate.share_of_step * (1 - rate.efficiency),
            evidence={"operator": rate.op, "efficiency": round(rate.efficiency, 4), "share_of_step": round(rate.share_of_step, 4),
                      "achieved_gflops": round(rate.achieved_flops_per_s / 1e9, 3),
                      "roof_gflops": round((rate.roof_flops_per_s or 0) / 1e9, 3), "shapes": rate.shapes,
                      "peaks_source": ev.peaks.source},
            locations=[Location.at(rate.file, rate.line, note=f"{rate.efficiency:.0%} of the roof")] if rate.file else [],
            fix=Fix(summary=fix, docs=["https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html",
                                       "https://en.wikipedia.org/wiki/Roofline_model"]),
        )


def _narrow(rate: OperatorRate, narrow: int) -> tuple[str, str] | None:
    """(the shape that starves the product, the fix) where the first call's shapes show one; else None."""
    shapes = [list(s) for s in rate.shapes]
    if rate.op in ROOF_ATTENTION or rate.op in ROOF_ATTENTION_BACKWARD:
        query = shapes[1] if rate.backward and len(shapes) > 1 else shapes[0] if shapes else []
        if query and query[-1] < narrow:
            heads = query[-3] if len(query) >= 3 else 0
            return (f"its {heads} heads have {query[-1]} dimensions each, {query[-1]} multiply-adds per score",
                    f"fewer, wider heads: {max(1, heads * query[-1] // 64)} of 64 dimensions hold the same width")
        return None
    if rate.op in BATCHED_MATMULS:  # many small products side by side: per-head scores computed by hand
        operands = shapes[1:] if rate.op in TRACE_BIAS_FIRST else shapes
        if len(operands) < 2 or len(operands[0]) < 3 or len(operands[1]) < 3:
            return None
        batch, m, k, n = operands[0][0], operands[0][-2], operands[0][-1], operands[1][-1]
        if k < narrow:
            return (f"its {batch} products of ({m} x {k}) by ({k} x {n}) each contract over {k}: {k} multiply-adds "
                    "per output", "contract over more: fewer, wider heads (64 dimensions or more per head)")
    return None
