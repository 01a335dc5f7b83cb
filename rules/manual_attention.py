"""Attention written out by hand instead of F.scaled_dot_product_attention.

What it detects:
    In the captured graph (so only code that actually runs): a matmul of queries and keys
    (``q @ kᵀ``, ``torch.matmul``, ``bmm``, ``baddbmm`` or an ``einsum`` such as
    ``"bhqd,bhkd->bhqk"``, or ``"bqhd,bkhd->bhqk"`` on tensors laid out [batch, seq, heads, dim],
    which the fix permutes for SDPA and back), in any layout of the sequence (batch-first or
    time-first, heads apart or folded into the batch, the scores viewed as [batch, heads, q, k]
    to be masked and back), optionally scaled (multiplied or divided, by a number or a 0-d
    tensor, before or after the matmul), masked (``masked_fill``, ``torch.where(mask, scores,
    min_value)``, or an added float mask) and cast, into ``softmax``, optionally cast back
    (``.type(v.dtype)``, ``.type_as(scores)``) and dropped out (``F.dropout`` or an
    ``nn.Dropout`` module), into a matmul with the values, where the attention weights are used
    for nothing else — the fairseq form, the
    nanoGPT form and the "eager" attention functions of HF transformers alike. A mask built in
    the forward by ``tril`` / ``triu``, or read from a buffer whose values are a triangle, is a
    causal mask: ``is_causal=True``.

Why it matters:
    The hand-written form materializes the full (batch, heads, T, T) score matrix several
    times per layer — scores, scaled, masked, softmax, dropout — and reads it back each time:
    memory traffic and activation memory quadratic in the sequence length.
    ``F.scaled_dot_product_attention`` dispatches to FlashAttention / memory-efficient
    kernels (on CUDA and CPU) that never store the matrix.

How to fix:
    Replace the block with ``F.scaled_dot_product_attention(q, k, v, attn_mask=...,
    dropout_p=p if self.training else 0.0, is_causal=...)``. Its default scale is
    ``1/sqrt(head_dim)``; pass ``scale=`` for any other. A boolean ``attn_mask`` marks the
    positions to *keep* (the opposite of ``masked_fill``'s mask).

Example:
    Before::

        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = att @ v

    After::

        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Iterator

from advisor.evidence import Evidence, GraphNode
from advisor.opnames import CAUSAL_BUILDERS
from advisor.rulekit.fixing import compiled_with, finish_graph, node_name
from advisor.rulekit.patterns import (
    ADDITIVE_MASKS,
    BADDBMM,
    CASTS,
    DIVIDE_SCALES,
    DROPOUT,
    EINSUM,
    FILL_MASKS,
    MASKS,
    MULTIPLY_SCALES,
    WHERE_MASKS,
    einsum_permutations,
    find_attention,
    mask_operands,
)
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Thresholds, rule
from advisor.sources import site_label

if TYPE_CHECKING:
    import torch

TRIANGULAR_BUFFERS = {"lower-triangular", "upper-triangular"}  # GraphNode.value_kind of a causal mask buffer
# masked_fill / where values at or below this zero a softmax weight in float32 (exp(-1e4) == 0);
# -inf and the common -1e9 / finfo.min stand-ins all qualify.
MASKED_FILL_AT_MOST = -1e4
CAUSAL_SEARCH_DEPTH = 4  # ops between a mask operand and the tril/triu that built it (== 0, slicing, view)


@rule(slug="manual-attention", code="ADV116", layer=Layer.MODEL, needs=("graph",), severity=Severity.MEDIUM)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.graph is None:
        yield Clean(why="no graph was captured")
        return
    graph = ev.graph
    nodes = {n.id: n for n in graph.nodes}
    digraph = graph.digraph
    inputs = lambda n: [nodes[a] for a in n.args if a in nodes]  # noqa: E731
    matches = find_attention(graph.calls(), name=lambda n: n.target, inputs=inputs,
                             users=lambda n: [nodes[s] for s in digraph.successors(n.id)],
                             equation=lambda n: n.constants[0].strip("'\"") if n.constants else "")
    if not matches:
        softmaxes = sum(1 for n in graph.calls() if n.target.rsplit(".", 1)[-1] in ("softmax", "_softmax"))
        yield Clean(why=f"no matmul of queries and keys feeds a softmax and a matmul with values in the graph "
                        f"({softmaxes} softmax call(s) in it)")
        return
    causal = any(_causal_mask(m.between, inputs) for m in matches)
    lines = {(n.file, n.line) for m in matches for n in (m.scores, m.softmax, m.output, *m.between, *m.after)}
    cost_us = None
    if ev.trace is not None and ev.trace.source_annotated:
        cost_us = ev.trace.median_per_step(c for c in ev.trace.calls if (c.file, c.line) in lines)
    share = ev.share_of_step(cost_us) if cost_us is not None else None
    first = matches[0]
    shape = first.softmax.shape
    yield Finding(
        message=(f"{len(matches)} attention block(s) written by hand (matmul, softmax, matmul), first at "
                 f"{site_label(first.softmax.file, first.softmax.line)}"
                 + (f" on a {shape} score matrix" if shape else "")
                 + ": F.scaled_dot_product_attention never materializes the scores"),
        impact=None,  # the lines also hold the projections; verification measures the gain
        evidence={"blocks": len(matches), "causal_mask": causal, "score_shape": shape,
                  "lines_share_of_step": round(share, 4) if share is not None else None},
        locations=[Location.at(m.softmax.file, m.softmax.line, function=m.softmax.module_path,
                               count_per_step=sum(1 for o in matches if (o.softmax.file, o.softmax.line) == site),
                               note=f"scores at line {m.scores.line}, output at line {m.output.line}")
                   for site, m in {(m.softmax.file, m.softmax.line): m for m in matches}.items() if site[0]][:6],
        fix=Fix(summary="replace the block with F.scaled_dot_product_attention(q, k, v"
                        + (", is_causal=True" if causal else ", attn_mask=keep_mask (or is_causal=True for a "
                                                             "lower-triangular mask)")
                        + ", dropout_p=p if self.training else 0.0); pass scale= if it is not 1/sqrt(head_dim)",
                docs=["https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html",
                      "https://pytorch.org/tutorials/intermediate/scaled_dot_product_attention_tutorial.html"]),
    )


def _causal_mask(between: list[GraphNode], inputs: Callable[[GraphNode], list[GraphNode]]) -> bool:
    """Whether a mask operand descends, within a few ops, from tril/triu or a triangular buffer."""
    for node in between:
        if node.target not in MASKS:
            continue
        frontier = mask_operands(node, lambda n: n.target, inputs)
        for _ in range(CAUSAL_SEARCH_DEPTH):
            if any(n.target in CAUSAL_BUILDERS or n.value_kind in TRIANGULAR_BUFFERS for n in frontier):
                return True
            frontier = [i for n in frontier for i in inputs(n)]
    return False


@check.fix(tolerance=1e-4, what="F.scaled_dot_product_attention")
def fix(target, finding):
    """A graph rewrite putting SDPA in place of each matched block, with the same scale and mask.

    Fused attention sums in another order (online softmax): equal to about 1e-6 relative in
    float32; 1e-4 allows for long rows.
    """
    return compiled_with(target, SdpaRewrite())


def use_sdpa(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The rewrite as a plain backend (one use)."""
    return SdpaRewrite()(graph_module, example_inputs)


class SdpaRewrite:
    """A backend replacing hand-written attention with ``F.scaled_dot_product_attention``.

    Only blocks it can translate exactly are replaced: scales by numbers or 0-d tensors before
    any mask, at most one mask (``masked_fill`` or ``where`` with a large negative value, or an
    added float mask; ``baddbmm``'s bias counts as one), dropout kept as ``dropout_p``. Others
    are left as they are, and ``describe()`` says why. A mask whose value on the example inputs
    is the lower triangle becomes ``is_causal=True`` — what the report recommends, and what lets
    SDPA pick its flash kernels — so the measured candidate is the recommended code.
    """

    def __init__(self) -> None:
        self.decisions: list[str] = []

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for decision in self.decisions:
            counts[decision] = counts.get(decision, 0) + 1
        return "; ".join(f"{n} block(s) {what}" for what, n in counts.items())

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        import torch

        graph = graph_module.graph
        matches = find_attention(list(graph.nodes), name=node_name, inputs=lambda n: n.all_input_nodes,
                                 users=lambda n: list(n.users),
                                 equation=lambda n: n.args[0] if n.args and isinstance(n.args[0], str) else "")
        values: dict[torch.fx.Node, Any] | None = None

        def value_of(node: torch.fx.Node) -> Any:
            nonlocal values
            if values is None:
                values = _node_values(graph_module, example_inputs)
            return values.get(node)

        for match in matches:
            plan = _sdpa_arguments(match, value_of)
            if isinstance(plan, str):
                self.decisions.append(f"left as written ({plan})")
                continue
            causal = plan["mask"] is not None and _is_causal(value_of(plan["mask"]), plan["invert_mask"],
                                                              value_of(match.scores))
            with graph.inserting_before(match.output):
                layouts = plan["layouts"] or {}
                for operand in ("query", "key", "value"):  # SDPA takes [batch..., seq, dim]
                    if operand in layouts and layouts[operand] != tuple(range(len(layouts[operand]))):
                        plan[operand] = graph.call_method("permute", (plan[operand], *layouts[operand]))
                key = plan["key"] if not plan["key_transposed"] else _untransposed(graph, plan["key"])
                mask = None if causal else plan["mask"]
                if mask is not None and plan["invert_mask"]:
                    mask = graph.call_function(torch.logical_not, (mask,))
                attention = graph.call_function(
                    torch.nn.functional.scaled_dot_product_attention, (plan["query"], key, plan["value"]),
                    {"attn_mask": mask, "dropout_p": plan["dropout_p"], "is_causal": causal, "scale": plan["scale"]})
            self.decisions.append("as SDPA(is_causal=True)" if causal else
                                  "as SDPA(attn_mask=...)" if mask is not None else "as SDPA without a mask")
            if "output" in layouts and layouts["output"] != tuple(range(len(layouts["output"]))):
                with graph.inserting_after(attention):
                    attention = graph.call_method("permute", (attention, *layouts["output"]))
            match.output.replace_all_uses_with(attention)
            for node in reversed([match.scores, *match.between, match.softmax, *match.after, match.output]):
                if not node.users:
                    graph.erase_node(node)
        return finish_graph(graph_module)


def _node_values(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> dict[torch.fx.Node, Any]:
    """Every node's value on the example inputs (one extra forward at compile time); {} if that fails."""
    import torch

    interpreter = torch.fx.Interpreter(graph_module, garbage_collect_values=False)
    try:
        with torch.no_grad():
            interpreter.run(*example_inputs)
    except Exception:  # noqa: BLE001 - symbolic or fake inputs: fall back to explicit masks
        return {}
    return interpreter.env


def _is_causal(mask: Any, inverted: bool, scores: Any) -> bool:
    """Whether a mask keeps exactly the lower triangle of the (L, S) scores: SDPA's ``is_causal``."""
    import torch

    if not isinstance(mask, torch.Tensor) or not isinstance(scores, torch.Tensor) or mask.dim() < 2:
        return False
    if mask.dtype == torch.bool:
        keep = ~mask if inverted else mask
    elif mask.is_floating_point() and not inverted and bool(((mask == 0) | (mask <= MASKED_FILL_AT_MOST)).all()):
        keep = mask == 0  # an additive 0 / large-negative mask
    else:
        return False
    rows, cols = scores.shape[-2:]
    if tuple(keep.shape[-2:]) != (rows, cols) or any(size != 1 for size in keep.shape[:-2]):
        return False
    return torch.equal(keep.reshape(rows, cols), torch.ones(rows, cols, dtype=torch.bool, device=keep.device).tril())


def _sdpa_arguments(match: Any, value_of: Callable[[Any], Any]) -> dict[str, Any] | str:
    """SDPA's arguments for a matched block, from the matcher's own op families; a reason (text)
    when a node cannot be translated exactly (a scale after the mask, a second mask, ...)."""
    import torch

    scores, output = match.scores, match.output
    scale, mask, invert, dropout_p = 1.0, None, False, 0.0
    if node_name(scores) in EINSUM:
        query, key, key_transposed = scores.args[1], scores.args[2], False
    elif node_name(scores) in BADDBMM:
        query, key, key_transposed = scores.args[1], scores.args[2], True
        beta, alpha = scores.kwargs.get("beta", 1), scores.kwargs.get("alpha", 1)
        scale = _number(alpha, value_of)
        if scale is None:
            return "baddbmm with a tensor alpha"
        if beta == 1:
            mask = scores.args[0]  # an added bias: an additive float mask
        elif beta != 0:
            return f"baddbmm with beta={beta}"
    else:
        query, key, key_transposed = scores.args[0], scores.args[1], True
    value = output.args[2] if node_name(output) in EINSUM else output.args[1]
    layouts = None
    if node_name(scores) in EINSUM and node_name(output) in EINSUM:
        layouts = einsum_permutations(scores.args[0], output.args[0])
        if layouts is None:
            return "einsum layouts that do not pair up"
    elif node_name(scores) in EINSUM or node_name(output) in EINSUM:
        if not _batch_leads((scores if node_name(scores) in EINSUM else output).args[0]):
            return "an einsum in a layout other than [batch..., seq, dim] next to a matmul"
    previous = scores
    for node in match.between:
        name, carried, previous = node_name(node), previous, node
        others = [a for a in node.args if a is not carried]
        if name in MULTIPLY_SCALES | DIVIDE_SCALES:
            factor = _number(others[0], value_of) if len(others) == 1 and len(node.args) == 2 else None
            if name in DIVIDE_SCALES and node.args[0] is not carried:
                factor = None  # c / scores is no scale
            if factor is None or mask is not None:
                return "a scale after the mask" if mask is not None else "a scale that is not a number"
            scale = scale * factor if name in MULTIPLY_SCALES else scale / factor
        elif name in FILL_MASKS and mask is None and len(node.args) == 3 and _large_negative(node.args[2], value_of):
            mask, invert = node.args[1], True
        elif name in WHERE_MASKS and mask is None and len(node.args) == 3 and _large_negative(node.args[2], value_of):
            mask = node.args[0]
        elif name in ADDITIVE_MASKS and mask is None and len(others) == 1 and isinstance(others[0], torch.fx.Node):
            mask = others[0]
        elif name in CASTS:
            continue
        else:
            return "a second mask" if name in MASKS else f"{name} between the scores and the softmax"
    for node in match.after:
        if node_name(node) in DROPOUT:
            p, training = (list(node.args[1:3]) + [node.kwargs.get("p", 0.5), node.kwargs.get("training", True)])[:2]
            dropout_p = float(p) if training else 0.0
    return {"scale": scale, "mask": mask, "invert_mask": invert, "dropout_p": dropout_p,
            "query": query, "key": key, "key_transposed": key_transposed, "value": value, "layouts": layouts}



def _batch_leads(equation: str) -> bool:
    """Both operands and the result laid out [batch..., seq, dim]: the batch dimensions first, alike."""
    operands, result = equation.replace(" ", "").split("->")
    a, b = operands.split(",")
    return a[:-2] == b[:-2] == result[:-2]


def _number(value: Any, value_of: Callable[[Any], Any]) -> float | None:
    """A plain number, or the value of a node holding a one-element tensor (``torch.full([], c)``)."""
    import torch

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, torch.fx.Node):
        held = value_of(value)
        if isinstance(held, torch.Tensor) and held.numel() == 1:
            return float(held.item())
        if isinstance(held, (int, float)):
            return float(held)
    return None


def _large_negative(value: Any, value_of: Callable[[Any], Any]) -> bool:
    """A fill value that zeroes a softmax weight (-inf, finfo.min, or a stand-in such as -1e9)."""
    number = _number(value, value_of)
    return number is not None and number <= MASKED_FILL_AT_MOST


def _untransposed(graph: torch.fx.Graph, key_transposed: torch.fx.Node) -> torch.fx.Node:
    """k from k.transpose(-2, -1); otherwise a transpose of what the matmul was given."""
    if key_transposed.op == "call_method" and key_transposed.target == "transpose" and len(key_transposed.args) == 3:
        rank = len(key_transposed.meta["example_value"].shape) if "example_value" in key_transposed.meta else 4
        dims = {d % rank for d in key_transposed.args[1:] if isinstance(d, int)}
        if dims == {rank - 1, rank - 2}:
            return key_transposed.args[0]
    return graph.call_method("transpose", (key_transposed, -2, -1))


@check.patch(what="the hand-written block as one scaled_dot_product_attention call")
def patch(files, finding):
    """Each block the finding names (from its scores line to its output line), when it is the plain chain
    ``attention_edit`` reads; the dropout, the mask and the scale carried over."""
    from advisor.rulekit.attention_edit import sdpa_changes

    changes = []
    for place in finding.locations:
        scores, output = (int(n) for n in re.findall(r"line (\d+)", place.note)[:2])
        source = files.read(place.file)
        changes += sdpa_changes(source, scores, output)
    return source.with_torch(changes) if changes else changes

