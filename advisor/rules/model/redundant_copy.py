"""Copies and conversions that change nothing.

What it detects:
    In the captured graph:

    * ``.clone()`` of an intermediate result (not a model input or parameter) when neither
      the clone nor the original is modified in place afterwards: the copy is never needed;
    * ``.contiguous()`` on the output of an op that always returns a fresh contiguous tensor
      (``linear``, ``matmul``, ``cat``, ``layer_norm`` ...): it returns its input, a no-op;
    * a dtype conversion applied to a value just converted to the same dtype
      (``x.float().float()``, ``.to(dtype)`` twice).

    A single ``.float()`` or ``.to(dtype)`` that is a no-op in this audit is *not* reported:
    under autocast in production it converts. Neither is ``.contiguous()`` after a view,
    whose need can depend on the input's shape.

Why it matters:
    A redundant clone reads and writes the whole tensor (and allocates it) every step; in
    training it also keeps another activation alive for backward. No-op calls cost only
    their dispatch, but they mislead readers into thinking a copy is required.

How to fix:
    Delete the call.

Example:
    Before::

        h = self.proj(x).clone()
        y = self.norm(h.contiguous())

    After::

        h = self.proj(x)
        y = self.norm(h)
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable, Iterator

from advisor.evidence import Evidence, GraphNode
from advisor.opnames import DTYPE_CONVERSIONS, FRESH_CONTIGUOUS
from advisor.rulekit.fixing import compiled_with, finish_graph, node_site
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label

if TYPE_CHECKING:
    import torch



@rule(
    slug="redundant-copy",
    code="ADV118",
    layer=Layer.MODEL,
    needs=("graph",),
    severity=Severity.LOW,
    thresholds={"min_share": Threshold(0.01, "share of the step in redundant clones that makes it low, not info")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.graph is None:
        yield Clean(why="no graph was captured")
        return
    nodes = {n.id: n for n in ev.graph.nodes}
    users: dict[str, list[GraphNode]] = defaultdict(list)
    for node in ev.graph.nodes:
        for arg in node.args:
            users[arg].append(node)
    found: list[tuple[GraphNode, str]] = []
    for node in ev.graph.calls():
        source = nodes.get(node.args[0]) if node.args else None
        if source is None:
            continue
        if node.target in ("clone", "torch.clone") and _redundant_clone(node, source, users):
            found.append((node, "clone of a value never modified in place"))
        elif node.target == "contiguous" and source.target in FRESH_CONTIGUOUS and not node.constants \
                and source.contiguous:
            found.append((node, f".contiguous() on the output of {source.target}, always contiguous"))
        elif (node.target in DTYPE_CONVERSIONS and source.target in DTYPE_CONVERSIONS and node.dtype == source.dtype
              and node.device == source.device and node.stride == source.stride and source.args
              and (origin := nodes.get(source.args[0])) is not None and origin.dtype != source.dtype):
            found.append((node, f"converts to {node.dtype} a value just converted to {node.dtype}"))
    if not found:
        yield Clean(why="no clone, contiguous() or dtype conversion in the graph copies a tensor that needed none")
        return
    cost_us = _clone_cost_us(ev, [n for n, _ in found if "clone" in n.target])
    share = ev.share_of_step(cost_us) if cost_us is not None else None
    sites: dict[tuple[str, int, str], list[tuple[GraphNode, str]]] = defaultdict(list)
    for node, why in found:
        sites[(node.file, node.line, node.target)].append((node, why))
    first_node, first_why = found[0]
    yield Finding(
        severity=Severity.LOW if share is not None and share >= th.min_share else Severity.INFO,
        message=(f"{len(found)} copy or conversion call(s) change nothing; first at "
                 f"{site_label(first_node.file, first_node.line)}: {first_why}"
                 + (f" (redundant clones: {share:.1%} of the step)" if share else "")),
        impact=share,
        evidence={"calls": len(found), "clone_share_of_step": round(share, 4) if share is not None else None,
                  "clone_us_per_step": round(cost_us, 1) if cost_us is not None else None,
                  "sites": [[file, line, target] for file, line, target in sites]},
        locations=[Location.at(file, line, note=calls[0][1]) for (file, line, _), calls in list(sites.items())[:8]
                   if file],
        fix=Fix(summary="delete these calls: the values are already what they produce",
                docs=["https://pytorch.org/docs/stable/generated/torch.Tensor.contiguous.html",
                      "https://pytorch.org/docs/stable/generated/torch.clone.html"]),
    )


def _mutates(node: GraphNode) -> bool:
    name = node.target.rsplit(".", 1)[-1]
    return name in ("setitem", "copy_") or (name.endswith("_") and not name.endswith("__"))


def _redundant_clone(node: GraphNode, source: GraphNode, users: dict[str, list[GraphNode]]) -> bool:
    if source.op in ("placeholder", "get_attr") or not source.op.startswith("call"):
        return False  # cloning an input or parameter protects the caller's data
    if any(u.op == "output" for u in users[node.id]):
        return False  # returned to the caller, who may modify it
    return not any(_mutates(u) for u in users[node.id]) and not any(_mutates(u) for u in users[source.id])


def _clone_cost_us(ev: Evidence, clones: list[GraphNode]) -> float | None:
    trace = ev.trace
    if trace is None or not trace.source_annotated:
        return None
    lines = {(n.file, n.line) for n in clones}
    calls = [c for c in trace.calls if (c.file, c.line) in lines and c.api in ("Tensor.clone", "clone")]
    return trace.median_per_step(calls)


@check.fix(tolerance=1e-6, what="redundant calls removed")
def fix(target, finding):
    """A graph rewrite deleting exactly the reported calls (each replaced by its input)."""
    sites = {(file, line, name) for file, line, name in finding.evidence["sites"]}
    return compiled_with(target, drop_calls(sites))


def drop_calls(sites: set[tuple[str, int, str]]) -> Callable[..., Any]:
    """A backend removing the method calls at (file, line, method): each is replaced by its input.

    For calls that return their input's value unchanged (a redundant ``.clone()``); a later
    in-place use would then change the input, which the numerics check would catch.
    """
    def backend(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        for node in list(graph_module.graph.nodes):
            if node.op == "call_method" and (*node_site(node), node.target) in sites and node.args:
                node.replace_all_uses_with(node.args[0])
                graph_module.graph.erase_node(node)
        return finish_graph(graph_module)
    return backend
