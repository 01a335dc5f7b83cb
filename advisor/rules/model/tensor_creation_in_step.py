"""Constant tensors rebuilt every step: masks, position ids, lookup tables.

What it detects:
    In the captured graph, values computed only from factory calls with constant arguments
    (``torch.tensor(list)``, ``arange``, ``ones``, ``zeros``, ``full``, ``eye``, ``linspace``)
    and pure ops on them (``triu`` of a ``full``, ``== 0`` of a ``tril``): the same tensor,
    rebuilt in every forward. Random factories and in-place ops are never counted as constant.

Why it matters:
    On a GPU each such tensor is allocated and filled by extra kernel launches every step,
    and ``torch.tensor(list)`` / ``as_tensor`` build the data on the host and copy it to the
    device (a synchronous pageable copy). On a CPU the fill itself costs, which grows with
    the mask (a T x T causal mask is T² writes per step).

How to fix:
    Build the tensor once in ``__init__`` and keep it with
    ``self.register_buffer(name, tensor, persistent=False)`` (it then follows ``.to(device)``);
    slice it per step when the size varies. Or create it directly on the device.

Example:
    Before::

        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)

    After::

        # __init__
        self.register_buffer("mask", torch.triu(torch.full((MAX_T, MAX_T), float("-inf")), 1),
                             persistent=False)
        # forward
        mask = self.mask[:T, :T]
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable, Iterator

from advisor.evidence import Evidence, GraphNode
from advisor.opnames import FROM_HOST
from advisor.rulekit.fixing import compiled_with, finish_graph, node_name
from advisor.rulekit.patterns import find_constants
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule

if TYPE_CHECKING:
    import torch



@rule(
    slug="tensor-creation-in-step",
    code="ADV119",
    layer=Layer.MODEL,
    needs=("graph",),
    severity=Severity.LOW,
    thresholds={"min_share": Threshold(0.02, "share of the step spent rebuilding constants (CPU runs)")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.graph is None:
        yield Clean(why="no graph was captured")
        return
    constants = find_constants(ev.graph.calls(), name=lambda n: n.target, is_function=lambda n: n.op == "call_function",
                               inputs=lambda n: n.args, key=lambda n: n.id)
    constants = [n for n in constants if not _written_later(ev.graph, n)]
    if not constants:
        yield Clean(why="the forward builds no constant tensor from scratch in each step")
        return
    by_line: dict[tuple[str, int], list[GraphNode]] = defaultdict(list)
    for node in constants:
        by_line[(node.file, node.line)].append(node)
    cost_us = _cost_us(ev, by_line)
    share = ev.share_of_step(cost_us) if cost_us is not None else None
    from_host = [n for n in constants if _short(n.target) in FROM_HOST]
    if share is not None and not ev.on_cuda:
        yield ev.share_margin("share of the step rebuilding constants", share, th.min_share)  # reported when silent too
    if not ev.on_cuda and (share is None or share < th.min_share):
        return  # on a CPU, small constants cost next to nothing: not worth a change
    constant_ids = {n.id for n in constants}
    # the last constant of each chain (triu, not the full it reads): the tensors the step then uses
    elements = sum(_numel(n) for n in constants
                   if not any(user in constant_ids for user in ev.graph.digraph.successors(n.id)))
    yield Finding(
        severity=Severity.MEDIUM if ev.on_cuda and from_host else Severity.LOW,
        message=(f"{len(by_line)} line(s) rebuild constant tensors every step ({elements:,} elements)"
                 + (f", {share:.0%} of the step" if share is not None else "")
                 + (f"; {len(from_host)} built from Python data on the host and copied to the device"
                    if ev.on_cuda and from_host else "")
                 + ": build them once and keep them as buffers"),
        impact=share,
        evidence={"lines": len(by_line), "constant_ops": len(constants), "elements": elements,
                  "share_of_step": round(share, 4) if share is not None else None,
                  "ms_per_step": round(cost_us / 1000, 4) if cost_us is not None else None,
                  "from_host": len(from_host)},
        locations=[Location.at(file, line, note=", ".join(sorted({_short(n.target) for n in nodes})))
                   for (file, line), nodes in list(by_line.items())[:8] if file],
        fix=Fix(summary="create these tensors once in __init__ with register_buffer(..., persistent=False) "
                        "and slice them per step",
                docs=["https://pytorch.org/docs/stable/generated/torch.nn.Module.html"
                      "#torch.nn.Module.register_buffer",
                      "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                      "#create-tensors-directly-on-the-target-device"]),
    )


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1].strip("_")


def _numel(node: GraphNode) -> int:
    total = 1
    for size in node.shape or [0]:
        total *= size
    return total


def _cost_us(ev: Evidence, by_line: dict[tuple[str, int], list[GraphNode]]) -> float | None:
    """Profiled time of the constant-building calls on those lines, per step."""
    trace = ev.trace
    if trace is None or not trace.source_annotated:
        return None
    wanted = {key: {_short(n.target) for n in nodes} for key, nodes in by_line.items()}
    calls = [c for c in trace.calls
             if (c.file, c.line) in wanted and _short(c.api) in wanted[(c.file, c.line)]]
    return trace.median_per_step(calls)


@check.fix(tolerance=1e-6, what="constants built once")
def fix(target, finding):
    """A graph rewrite computing the constant subgraphs once (what register_buffer does by hand)."""
    return compiled_with(target, fold_constants)


def constant_nodes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """Nodes computed from constant factory calls only: the same value every step."""
    calls = [n for n in graph.nodes if n.op in ("call_function", "call_method")]
    return find_constants(calls, name=node_name, is_function=lambda n: n.op == "call_function",
                          inputs=lambda n: n.all_input_nodes, key=lambda n: n)


def fold_constants(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A backend computing constant subgraphs once, at compile time, and reusing their tensors.

    What ``register_buffer`` does by hand: masks, position ids and lookup tables built from
    constants are no longer rebuilt every step.
    """
    import torch

    constant = constant_nodes(graph_module.graph)
    values: dict[torch.fx.Node, Any] = {}
    for node in constant:
        args = torch.fx.node.map_arg(node.args, lambda n: values[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: values[n])
        if node.op == "call_function":
            values[node] = node.target(*args, **kwargs)
        else:
            values[node] = getattr(args[0], node.target)(*args[1:], **kwargs)
    folded = set(constant)
    for index, node in enumerate(constant):
        if not isinstance(values[node], torch.Tensor) or all(user in folded for user in node.users):
            continue  # only the frontier is kept: the nodes read by the rest of the graph
        name = f"_advisor_constant_{index}"
        graph_module.register_buffer(name, values[node])
        with graph_module.graph.inserting_before(node):
            node.replace_all_uses_with(graph_module.graph.get_attr(name))
    return finish_graph(graph_module)


def _written_later(graph, node: GraphNode) -> bool:
    """A tensor built in the step that is then changed in place (an accumulator: ``zeros`` then ``index_add_``),
    or handed on out of the captured graph (code past a graph break may change it): not a constant."""
    digraph = graph.digraph
    for successor in digraph.successors(node.id):
        user = digraph.nodes[successor]["node"]
        if user.op == "output":
            return True
        method = user.target.rsplit(".", 1)[-1]
        if method.endswith("_") and not method.endswith("__") and user.args and user.args[0] == node.id:
            return True
    return False
