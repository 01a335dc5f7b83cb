"""A Python loop applies the same small operations to one tensor at a time.

What it detects:
    A ``for`` loop (or a comprehension) in the user's code whose body, each step, calls torch
    operators at least ``min_calls`` times on tensors of at least ``min_shapes`` different shapes
    (a walk over parameters or buffers, not over time steps of one tensor), every one of them an
    operator torch also runs over a list of tensors at once (``torch._foreach_<name>``, read from
    the run's own torch), taking at least ``min_share`` of the profiled step: an exponential moving
    average of weights (MoCo's momentum encoder, an EMA model), a manual SGD update, per-tensor
    clipping or norms. Placed at the loop, with the body's lines and their calls per step. The
    optimizer's own per-tensor work is optimizer-foreach's; one tensor looped over time steps is
    kernel-storm's.

Why it matters:
    Each iteration pays Python and the dispatcher for every operator (a few microseconds on a CPU,
    a kernel launch on a GPU) and, written as ``k = k * m + q * (1 - m)``, allocates new tensors
    for the products and the sum. The work itself is a few elementwise passes: over tens or
    hundreds of parameter tensors the overhead is most of the loop's time. ``torch._foreach_*``
    runs each operator over all tensors in one call (one kernel per group of tensors on a GPU),
    in place.

How to fix:
    Gather the tensors into lists once and call the foreach form: ``torch._foreach_lerp_(keys,
    queries, 1 - m)`` for a moving average, ``torch._foreach_add_(params, grads, alpha=-lr)`` for
    a manual SGD step, ``torch._foreach_mul_(tensors, factor)`` for a scaling;
    ``torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)`` for clipping.
    ``advisor fix`` writes the loop of one moving average, scaling or scaled addition as these calls, and
    ``advisor audit`` measures that edit on a copy of the source.

Example:
    Before::

        for q, k in zip(encoder_q.parameters(), encoder_k.parameters()):
            k.data = k.data * m + q.data * (1.0 - m)

    After::

        queries, keys = list(encoder_q.parameters()), list(encoder_k.parameters())
        torch._foreach_lerp_(keys, queries, 1.0 - m)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import FOREACH_OPERATORS_TORCH_2_13, METADATA_OP_PREFIXES, ROOF_NO_WORK
from advisor.patch.codemods import NoEdit
from advisor.rulekit.loops import enclosing_loop
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.rules.model.tensor_loop.foreach_edit import foreach_changes
from advisor.sources import is_library_path, site_label
from advisor.trace.parse import SourceCall, Trace

DOCS = ["https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html",
        "https://pytorch.org/tutorials/recipes/foreach_map.html"]


@dataclass
class LoopSite:
    file: str
    line: int  # the loop's own line
    calls: list[SourceCall] = field(default_factory=list)
    lines: dict[int, int] = field(default_factory=dict)  # body line -> calls over the profiled steps
    operators: set[str] = field(default_factory=set)
    shapes: set[tuple] = field(default_factory=set)
    other: set[str] = field(default_factory=set)  # operators with no foreach form


@rule(
    slug="tensor-loop",
    code="ADV149",
    layer=Layer.MODEL,
    needs=("trace",),
    severity=Severity.MEDIUM,
    high_at="high_share",
    thresholds={
        "min_calls": Threshold(24, "torch calls per step in one loop before it is judged", "count"),
        "min_shapes": Threshold(2, "different tensor shapes the loop's calls work on (one shape: a loop over time)",
                                "count"),
        "min_share": Threshold(0.05, "share of the profiled step in the loop's calls"),
        "high_share": Threshold(0.25, "share of the profiled step from which the finding is high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if not trace.source_annotated:
        yield Clean(why="the trace names no line of the user's code (recorded elsewhere): loops cannot be placed")
        return
    foreach = set(ev.env.foreach_operators) if ev.env is not None and ev.env.foreach_operators \
        else set(FOREACH_OPERATORS_TORCH_2_13)
    loops = _loops(trace, foreach)
    steps, step_us = trace.step_count, trace.mean_step_us()
    candidates = []
    for site in loops.values():
        per_step = len(site.calls) / steps
        if per_step < th.min_calls or len(site.shapes) < th.min_shapes or site.other or not site.operators:
            continue
        share = trace.median_per_step(site.calls) / step_us if step_us else 0.0
        candidates.append((share, per_step, site))
    if not candidates:
        yield Clean(why=_quiet(loops, steps))
        return
    share, per_step, site = max(candidates, key=lambda item: item[0])
    margin = ev.share_margin("share of the profiled step in a loop over tensors", share, th.min_share)
    yield margin
    if share < th.min_share:
        return
    operators = sorted(site.operators)
    yield Finding(
        message=(f"a Python loop at {site_label(site.file, site.line)} runs {per_step:g} torch calls per step one "
                 f"tensor at a time ({', '.join(operators)} on {len(site.shapes)} tensor shapes), {share:.0%} of the "
                 f"profiled step: torch._foreach_* runs each over all the tensors in one call"),
        impact=share,
        margin=margin,
        evidence={"calls_per_step": round(per_step, 2), "operators": operators, "tensor_shapes": len(site.shapes),
                  "share_of_profiled_step": round(share, 4), "loop_line": site.line},
        locations=[Location.at(site.file, site.line, note="the loop")] + [
            Location.at(site.file, line, count_per_step=round(count / steps, 2), note="its body's torch calls")
            for line, count in sorted(site.lines.items())],
        fix=Fix(summary=_advice(operators), docs=DOCS),
    )


def _loops(trace: Trace, foreach: set[str]) -> dict[tuple[str, int], LoopSite]:
    """The profiled steps' torch calls grouped by the user's loop around their line."""
    found: dict[tuple[str, int], LoopSite] = {}
    loops: dict[tuple[str, int], int | None] = {}  # (file, line) -> its loop's line: a loop's line repeats per call
    for call in trace.calls:
        if (call.step is None and trace.steps) or not call.file or is_library_path(call.file):
            continue
        place = (call.file, call.line)
        loop = loops[place] if place in loops else loops.setdefault(place, enclosing_loop(*place))
        if loop is None or loop == call.line:
            continue  # in no loop, or the loop's own header (its iterable)
        site = found.setdefault((call.file, loop), LoopSite(call.file, loop))
        site.calls.append(call)
        site.lines[call.line] = site.lines.get(call.line, 0) + 1
        inside = set(call.ops)
        for index in call.ops:
            op = trace.ops[index]
            if (op.parent is not None and op.parent in inside) or op.name in ROOF_NO_WORK \
                    or op.name.startswith(METADATA_OP_PREFIXES):
                continue  # what the call's own operators run; views and metadata
            name = op.name.removeprefix("aten::").rstrip("_")
            (site.operators if name in foreach else site.other).add(name)
            if op.input_dims and isinstance(op.input_dims[0], (list, tuple)):
                site.shapes.add(_frozen(op.input_dims[0]))
    return found


def _frozen(dims: list | tuple) -> tuple:
    """A recorded shape as a key (a list of tensors records a list of shapes)."""
    return tuple(_frozen(d) if isinstance(d, (list, tuple)) else d for d in dims)


def _quiet(loops: dict, steps: int) -> str:
    if not loops:
        return "no torch call of the profiled steps sits in a Python loop of the user's code"
    busiest = max(loops.values(), key=lambda site: len(site.calls))
    reason = (f"operators with no foreach form ({', '.join(sorted(busiest.other)[:4])})" if busiest.other else
              f"{len(busiest.shapes)} tensor shape(s)")
    return (f"the busiest loop, at {site_label(busiest.file, busiest.line)}, makes {len(busiest.calls) / steps:g} torch "
            f"calls per step: {reason}")


def _advice(operators: list[str]) -> str:
    if {"mul", "add"} <= set(operators) or "lerp" in operators:
        return ("a moving average over the tensors in one call: torch._foreach_lerp_(targets, sources, 1 - m) "
                "(targets = the averaged tensors, as lists gathered once)")
    if operators == ["add"]:
        return "one update over the lists: torch._foreach_add_(params, grads, alpha=-lr)"
    if "norm" in operators:
        return "torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True), or torch._foreach_norm(tensors)"
    return "call " + ", ".join(f"torch._foreach_{name}_" for name in operators) + " over lists of the tensors"


@check.advice_only
def expected(finding: Finding) -> str:
    """A loop has no runtime rewrite: it is measured as its patch where a patched copy of the model file can run
    (advisor audit, advisor fix); elsewhere (a script's run) say what the loop costs."""
    share = finding.evidence.get("share_of_profiled_step")
    return (f"a loop is rewritten in the source, not at run time (advisor fix writes and measures it); expected: "
            f"most of the loop's {share:.0%} of the profiled step (its calls' dispatch and new tensors), the "
            "foreach form's few calls remaining")


@check.patch(what="the loop's update written as torch._foreach_* calls over lists of its tensors", tolerance=1e-5)
def patch(files, finding):
    """The loop the finding names, where its body is one moving average, scaling or scaled addition per tensor
    (``advisor.rules.model.tensor_loop.foreach_edit``); any other body is left to the user, with the reason."""
    loop = next((place for place in finding.locations if place.note == "the loop"), None)
    if loop is None or not loop.file:
        raise NoEdit("the finding names no loop in the user's source")
    return foreach_changes(files.read(loop.file), loop.line)
