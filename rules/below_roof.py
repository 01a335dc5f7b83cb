"""Matrix work that runs far below what this machine's matmuls reach, for a reason its shapes show.

What it detects:
    An operator group (one matmul, convolution or fused attention at one line, its backward apart) holding at
    least ``min_share`` of the profiled step whose achieved FLOP/s is under ``max_efficiency`` of its roof: the
    lesser of the machine's measured matmul peak for its dtype and its arithmetic intensity times the measured
    bandwidth (the audit measures both once per machine). It fires only where the shapes explain the shortfall:
    a dimension of the product under ``narrow`` (attention heads of a few dimensions, a K of 8), or a
    convolution with few channels per group. A shortfall the shapes do not explain is left to the other rules.

Why it matters:
    A matmul unit is fed by its inner dimension: with four multiply-adds per output it spends its time loading
    and storing, so the same FLOPs in a wider shape run several times faster. The work is there to be done; the
    shape decides how well the machine does it.

How to fix:
    Give each product a wide inner dimension: fewer, wider attention heads (64 dimensions or more per head, the
    same model width), small products stacked into one batched matmul, grouped convolutions with more channels
    per group (or fused with the pointwise convolution that follows).

Example:
    Before::

        heads = 32  # of 4 dimensions each, width 128

    After::

        heads = 2   # of 64 dimensions each, the same width and FLOPs
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import ROOF_ATTENTION, ROOF_ATTENTION_BACKWARD, ROOF_CONV, TRACE_BIAS_FIRST, TRACE_MATMULS
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
    rates = [r for r in operator_rates(ev.trace, ev.peaks) if r.flops_per_step > 0 and r.share_of_step >= th.min_share
             and (r.op in TRACE_MATMULS or r.op in ROOF_ATTENTION or r.op in ROOF_ATTENTION_BACKWARD or r.op in ROOF_CONV)]
    low = [r for r in rates if r.efficiency < th.max_efficiency]
    lowest = min((r.efficiency for r in rates), default=1.0)
    yield ev.share_margin("the lowest efficiency of a matrix operator holding a share of the step", lowest,
                          th.max_efficiency)
    explained = [(rate, cause) for rate in low if (cause := _narrow(rate, int(th.narrow)))]
    if not explained:
        yield Clean(why=f"{len(low)} matrix operator group(s) below {th.max_efficiency:.0%} of the roof, none with a "
                        "narrow shape to explain it" if low else "no matrix operator group far below its roof")
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
    if rate.op in TRACE_MATMULS:
        operands = shapes[1:] if rate.op in TRACE_BIAS_FIRST else shapes
        if len(operands) < 2 or len(operands[0]) < 2 or len(operands[1]) < 2:
            return None
        m, k, n = operands[0][-2], operands[0][-1], operands[1][-1]
        if min(m, k, n) < narrow:
            return (f"a ({m} x {k}) by ({k} x {n}) product: a dimension of {min(m, k, n)} leaves the matmul units idle",
                    "stack the small products into one larger (batched) matmul, or widen the narrow dimension")
        return None
    if rate.op == "aten::convolution" and len(shapes) > 1 and len(shapes[1]) > 1 and shapes[1][1] < narrow:
        return (f"{shapes[1][1]} input channel(s) per group: a grouped (depthwise) convolution is little work per byte",
                "fuse it with the pointwise convolution after it, or use more channels per group")
    return None
