"""Layout copies of non-contiguous tensors take a meaningful share of the step.

What it detects:
    Time the step spends copying tensors into a new memory layout: explicit ``.contiguous()``,
    ``.clone()`` and ``reshape`` copies of permuted or transposed views, and the copies
    operators make internally when handed a non-contiguous input (``aten::contiguous``,
    ``aten::clone``, ``aten::copy_``, ``aten::_reshape_copy`` in the trace). Reported only when
    these copies are at least ``min_share`` of the step (their profiled time over the
    profiler-free step time). Each place names the view op
    that made the layout (a ``permute``/``transpose`` from the captured graph's strides) and the
    op that paid for the copy. A copy the backward makes is placed at the forward line whose
    view it undoes (autograd's sequence numbers in the trace). In a trace advisor annotated, a copy
    inside a library's kernel, run by no line of the user's, is not counted: there is nothing in
    the user's code to change.

Why it matters:
    A layout copy reads and writes the whole tensor and computes nothing: pure memory traffic,
    often as expensive as the op it feeds. A permute-then-copy pattern inside every block
    repeats that traffic per layer, per step.

How to fix:
    Produce the layout once and keep it: for conv nets run in ``channels_last`` (then the NHWC
    permute is already contiguous); let matmul/linear/bmm take transposed operands directly
    (they fold the transpose into the GEMM) instead of calling ``.contiguous()`` first; move
    a permute out of a loop.

Example:
    Before::

        y = y.permute(0, 2, 3, 1).contiguous()   # NCHW -> NHWC copy, every block
        y = self.norm(y)
        y = y.permute(0, 3, 1, 2).contiguous()   # and back

    After::

        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
        y = self.norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)   # views, no copies
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from advisor.evidence import Evidence, GraphCapture, GraphNode
from advisor.opnames import (
    CONV_2D_MODULES,
    CONV_2D_OPS,
    CONV_OPS,
    GRAPH_MATMULS,
    KEEPS_TRANSPOSE,
    LAYOUT_COPY_OPS,
    LAYOUT_VIEWS,
    MATMUL_OPS,
    NEEDS_CONTIGUOUS,
    USER_COPY_APIS,
)
from advisor.patch.codemods import NoEdit
from advisor.rulekit.fixing import compiled_with, finish_graph, node_name
from advisor.rulekit.helpers import is_broadcast, is_contiguous, outermost, slower_than_float32
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label
from advisor.trace.parse import Op, Trace
from advisor.trace.roofline import DTYPES

if TYPE_CHECKING:
    import torch



@dataclass
class CopySite:
    file: str
    line: int
    us: float = 0.0
    count: int = 0
    paid_by: set[str] = field(default_factory=set)
    producers: set[str] = field(default_factory=set)
    feeds_matmul: bool = False
    nhwc: bool = False  # 4-D tensors in NHWC order are converted: channels_last would keep them


@rule(
    slug="non-contiguous",
    code="ADV102",
    layer=Layer.MODEL,
    needs=("trace",),
    severity=Severity.MEDIUM,
    high_at="high_share",
    thresholds={
        "min_share": Threshold(0.05, "share of the step spent in layout copies before it is reported"),
        "high_share": Threshold(0.20, "share of the step that makes the finding high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if trace is None or not trace.step_ops():
        yield Clean(why="no operators in the profiled steps" if trace is not None else "no trace")
        return
    sites, copies = _copy_sites(trace, _emulated(ev))
    copy_us = trace.median_per_step(copies)
    share = ev.share_of_step(copy_us)
    if share is None:
        yield Clean(why="the step's time is unknown (a trace without host operators per step), so the copies' share is too")
        return
    margin = ev.share_margin("layout-copy share of the step", share, th.min_share)
    yield margin  # how near it came: reported when the rule stays silent too
    if share < th.min_share:  # copies too small to matter: stay silent
        return
    step_us = ev.step_ms * 1000.0
    if ev.graph is not None:
        _attach_producers(ev.graph, sites)
    ranked = sorted(sites.values(), key=lambda s: -s.us)
    worst = ranked[0]
    where = site_label(worst.file, worst.line)
    made_by = f", a view made by {', '.join(sorted(worst.producers))}" if worst.producers else ""
    conv_net = _is_conv_net(ev)
    yield Finding(
        message=(
            f"layout copies take {share:.0%} of the step ({copy_us / 1000:.3g} ms per step, "
            f"{sum(s.count for s in ranked) / trace.step_count:g} copies); most at {where} "
            f"(paid by {', '.join(sorted(worst.paid_by))}{made_by})"
        ),
        impact=share,
        margin=margin,
        evidence={
            "copy_share_of_step": round(share, 4),
            "copy_ms_per_step": round(copy_us / 1000, 4),
            "copies_per_step": sum(s.count for s in ranked) / trace.step_count,
            "step_ms": round(step_us / 1000, 4),
            "conv_net": conv_net,
        },
        locations=[
            Location.at(
                s.file, s.line, function="" if s.file else ", ".join(sorted(s.paid_by)),
                count_per_step=s.count / trace.step_count,
                note=_note(s, step_us * trace.step_count),
            )
            for s in ranked[:8]
        ],
        fix=_fix(ranked, conv_net),
    )


def _emulated(ev: Evidence) -> set[str]:
    """The profiler's names of the reduced dtypes this device's roofs measured slower than float32 (emulated)."""
    slow = slower_than_float32(ev)
    return {name for name, dtype in DTYPES.items() if dtype in slow}


def _copy_sites(trace: Trace, emulated: set[str] = frozenset()) -> tuple[dict[tuple[str, int], CopySite], list[Op]]:
    sites: dict[tuple[str, int], CopySite] = {}
    copies = []
    for op in outermost(trace, LAYOUT_COPY_OPS):
        if not _copies_a_strided_input(trace, op):
            continue  # a copy of a contiguous tensor is not a layout problem
        outer = trace.outermost(op)
        if outer.name in MATMUL_OPS | CONV_OPS and outer.input_types and outer.input_types[0] in emulated:
            continue  # the convolution library's reorders for a dtype this CPU emulates: slow-precision's, no layout
        source = op.grad_of if op.grad_of is not None else op.src
        if source is None and trace.source_annotated:
            continue  # inside a library kernel, called by no line of the user's: not a layout the user chose
        copies.append(op)
        file, line = (source.file, source.line) if source is not None and source.exact else ("", 0)
        site = sites.setdefault((file, line), CopySite(file=file, line=line))
        site.us += op.dur
        site.count += 1
        site.paid_by.add(_payer(trace, op))
        site.nhwc |= any(_nhwc(d, st) for d, st in zip(op.input_dims, op.input_strides))
    return sites, copies


def _copies_a_strided_input(trace: Trace, op: Op, depth: int = 3) -> bool:
    for dims, strides in zip(op.input_dims, op.input_strides):
        if is_broadcast(dims, strides):
            continue  # materializing a broadcast (e.g. addmm's bias) is inherent, not a layout choice
        if isinstance(dims, list) and dims and not is_contiguous(dims, strides):
            return True
    # aten::contiguous -> clone -> copy_: the strides may only show on the nested copy
    return depth > 0 and any(_copies_a_strided_input(trace, child, depth - 1) for child in trace.children(op))


def _nhwc(dims: list, strides: list) -> bool:
    """A 4-D tensor whose channels are innermost in memory (channels_last order)."""
    return (isinstance(dims, list) and isinstance(strides, list) and len(dims) == 4 == len(strides)
            and dims[1] > 1 and strides[1] == 1 and strides[3] == dims[1])


def _payer(trace: Trace, op: Op) -> str:
    if op.call is not None and trace.calls[op.call].api in USER_COPY_APIS:
        return trace.calls[op.call].api.replace("Tensor.", ".") + "()"
    outer = trace.outermost(op)
    return outer.name if outer is not op else op.name


def _attach_producers(graph: GraphCapture, sites: dict[tuple[str, int], CopySite]) -> None:
    nodes = {n.id: n for n in graph.nodes}
    by_line: dict[tuple[str, int], list[GraphNode]] = defaultdict(list)
    for node in graph.calls():
        by_line[(node.file, node.line)].append(node)
    for key, site in sites.items():
        for node in by_line.get(key, []):
            for arg in node.args:
                producer = _layout_producer(nodes, nodes.get(arg))
                if producer is None:
                    continue
                site.producers.add(f"{producer.target} at {site_label(producer.file, producer.line)}")
                site.nhwc |= producer.target == "permute" and len(producer.shape or []) == 4
            site.feeds_matmul |= _feeds_matmul(graph, nodes, node.id)


def _layout_producer(nodes: dict[str, GraphNode], node: GraphNode | None) -> GraphNode | None:
    """Walk back from a non-contiguous value to the view op that first made it so."""
    found = None
    while node is not None and node.contiguous is False:
        if node.target in LAYOUT_VIEWS:
            found = node
        node = next((nodes[a] for a in node.args if a in nodes and nodes[a].contiguous is False), None)
    return found


def _feeds_matmul(graph: GraphCapture, nodes: dict[str, GraphNode], start: str) -> bool:
    """Whether the value flows straight into a matmul (through reshaping views at most)."""
    for successor in graph.digraph.successors(start):
        target = nodes[successor].target
        if target in GRAPH_MATMULS:
            return True
        if target in KEEPS_TRANSPOSE and _feeds_matmul(graph, nodes, successor):
            return True
    return False


def _is_conv_net(ev: Evidence) -> bool:
    """2-D convolutions: the layers channels_last applies to."""
    if ev.graph is not None:
        return any(n.module_type in CONV_2D_MODULES for n in ev.graph.calls())
    return ev.trace is not None and any(o.name in CONV_2D_OPS for o in ev.trace.top_ops())


def _note(site: CopySite, total_us: float) -> str:
    parts = [f"{site.us / total_us:.1%} of the step", "paid by " + ", ".join(sorted(site.paid_by))]
    if site.producers:
        parts.append("layout made by " + "; ".join(sorted(site.producers)))
    return "; ".join(parts)


def _fix(sites: list[CopySite], conv_net: bool) -> Fix:
    advice, before, after = [], "", ""
    if any(s.feeds_matmul for s in sites):
        advice.append("drop .contiguous() before matmul/linear/bmm: they take transposed operands directly")
        before = "y = y.transpose(1, 2).contiguous()\nout = self.proj(y)"
        after = "out = self.proj(y.transpose(1, 2))  # linear reads the strided view"
    if conv_net and any(s.nhwc for s in sites):
        advice.insert(0, "run the conv net in channels_last (model.to(memory_format=torch.channels_last) and the "
                         "same for the input): NHWC data then stays NHWC, and the .contiguous() calls can go")
        before = "y = y.permute(0, 2, 3, 1).contiguous()\ny = self.norm(y)\ny = y.permute(0, 3, 1, 2).contiguous()"
        after = ("# model and input in channels_last: these permutes are views\n"
                 "y = self.norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)")
    advice.append("produce each layout once and keep it (outside loops and per-layer code)")
    if not before:
        before = "for block in self.blocks:\n    x = block(x.transpose(1, 2).contiguous())"
        after = "x = x.transpose(1, 2).contiguous()  # once\nfor block in self.blocks:\n    x = block(x)"
    return Fix(summary="; ".join(advice), before=before, after=after,
               docs=["https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html"])


@check.fix(tolerance=1e-4, what="drop .contiguous() copies (and channels_last for conv nets)")
def fix(target, finding):
    """A layout-only rewrite: the same math, so results match up to float32 summation order.

    Not bit-exact: channels_last convolutions sum in another order (measured 1.9e-5 of the
    gradients' magnitude on a ResNet training step), hence 1e-4.
    """
    return compiled_with(target, drop_contiguous,
                         channels_last=bool(finding.evidence.get("conv_net")))


def drop_contiguous(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Remove plain ``.contiguous()`` calls: they copy memory and never change a value.

    Calls feeding ``view``/``reshape``/``flatten`` stay: ``view`` needs the contiguous memory and
    the others would make the same copy themselves, so removing them is no fix.
    """
    for node in list(graph_module.graph.nodes):
        if node.op == "call_method" and node.target == "contiguous" and len(node.args) == 1 and not node.kwargs \
                and not any(node_name(user) in NEEDS_CONTIGUOUS for user in node.users):
            node.replace_all_uses_with(node.args[0])
            graph_module.graph.erase_node(node)
    return finish_graph(graph_module)


@check.patch(what=".contiguous() calls that copy and feed no view, dropped")
def patch(files, finding):
    """At each line the finding names, a bare ``.contiguous()`` whose value no ``view``/``reshape``/``flatten``
    reads at once (those need the copy, or would make it themselves): its receiver kept instead. The graph
    fix's channels_last for conv nets has a codemod of its own (channels-last)."""
    changes = []
    for place in finding.locations:
        if not place.file:
            continue
        source = files.read(place.file)
        for call in source.calls("contiguous", place.line):
            if source.span(call)[0] == place.line and not call.args and source.method_used_by(call) not in NEEDS_CONTIGUOUS:
                changes.append(source.unwrap_method(call))
    if not changes:
        raise NoEdit("no .contiguous() call at the finding's lines that the copy could be dropped from")
    return changes

