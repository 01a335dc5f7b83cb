"""manual-attention's rewrite: each hand-written attention block the matcher finds (``rulekit/patterns.py``) replaced
in the captured graph by ``F.scaled_dot_product_attention`` with the same scale, masks and dropout, or left as
written with the reason. Beside the rule (this package's ``__init__``), which verifies it as its fix."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from advisor.rulekit.fixing import finish_graph, node_name
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
    SCORE_VIEWS,
    WHERE_MASKS,
    einsum_permutations,
    find_attention,
)

if TYPE_CHECKING:
    import torch

# masked_fill / where values at or below this zero a softmax weight in float32 (exp(-1e4) == 0);
# -inf and the common -1e9 / finfo.min stand-ins all qualify.
MASKED_FILL_AT_MOST = -1e4


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
            if "masks" in plan:  # views or several masks: one call of folded_attention in the block's place
                self._replace_folded(graph, match, plan, value_of)
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

    def _replace_folded(self, graph: torch.fx.Graph, match: Any, plan: dict, value_of: Callable[[Any], Any]) -> None:
        masks = plan["masks"]
        causal = (len(masks) == 1 and masks[0][0] in ("drop", "keep")
                  and _is_causal(value_of(masks[0][1]), masks[0][0] == "drop", value_of(match.scores)))
        with graph.inserting_before(match.output):
            key = plan["key"] if not plan["key_transposed"] else _untransposed(graph, plan["key"])
            attention = graph.call_function(folded_attention, (plan["query"], key, plan["value"]), {
                "masks": [] if causal else [list(mask) for mask in masks], "view": plan["view"],
                "scale": plan["scale"], "dropout_p": plan["dropout_p"], "is_causal": causal})
        self.decisions.append("as SDPA(is_causal=True)" if causal else "as SDPA(attn_mask=...)" if masks else
                              "as SDPA without a mask")
        match.output.replace_all_uses_with(attention)
        for node in reversed([match.scores, *match.between, match.softmax, *match.after, match.output]):
            if not node.users:
                graph.erase_node(node)


def folded_attention(query, key, value, *, masks: list, view: tuple[int, ...] | None, scale: float,
                     dropout_p: float, is_causal: bool):
    """SDPA for a block whose scores were viewed in another layout to be masked (heads folded into the batch,
    (B * H, L, S) seen as (B, H, L, S)) or masked several times (a bias, then a causal mask): the operands are seen
    in the masks' layout, the masks made one float ``attn_mask`` (a bool one where it is the only mask), and the
    result given back in the operands' layout. ``masks``: (kind, tensor, fill) in the order applied, kind "bias"
    (baddbmm's input, in the operands' layout), "add" (an added float mask), "drop" (masked_fill's: True drops)
    or "keep" (where's: True keeps); ``view``: the masks' layout's dimensions between its first and its last two."""
    import torch

    rows = query.shape[:-1]
    if view is not None:
        query, key, value = (t.reshape(-1, *view, *t.shape[-2:]) for t in (query, key, value))
    attn_mask = None
    for kind, tensor, fill in masks:
        if kind == "bias":
            bias = tensor.reshape(-1, *view, *tensor.shape[-2:]) if view is not None and tensor.dim() >= 3 \
                and tensor.shape[-3] == rows[0] else tensor
            attn_mask = bias if attn_mask is None else attn_mask + bias
        elif kind == "add":
            attn_mask = tensor if attn_mask is None else attn_mask + tensor
        else:
            drop = tensor if kind == "drop" else ~tensor
            if len(masks) == 1:
                attn_mask = ~drop  # SDPA's bool mask keeps where True
            else:
                base = attn_mask if attn_mask is not None else torch.zeros((), dtype=query.dtype, device=query.device)
                attn_mask = torch.where(drop, torch.full((), float(fill), dtype=query.dtype, device=query.device), base)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                                           is_causal=is_causal, scale=scale)
    return out.reshape(*rows, out.shape[-1])


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
    masks: list[tuple[str, Any, Any]] = []  # every mask, in the order applied (the folded form's)
    if node_name(scores) in EINSUM:
        query, key, key_transposed = scores.args[1], scores.args[2], False
    elif node_name(scores) in BADDBMM:  # baddbmm(input, batch1, batch2, *, beta, alpha), its operands by keyword too
        query, key, key_transposed = _operand(scores, 1, "batch1"), _operand(scores, 2, "batch2"), True
        beta, alpha = scores.kwargs.get("beta", 1), scores.kwargs.get("alpha", 1)
        scale = _number(alpha, value_of)
        if scale is None:
            return "baddbmm with a tensor alpha"
        beta = _number(beta, value_of)
        if beta == 1:
            mask = _operand(scores, 0, "input")  # an added bias: an additive float mask
            masks.append(("bias", mask, None))
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
    previous, view, masked_in = scores, None, set()  # the layout the scores are seen in; those masked in
    for node in match.between:
        name, carried, previous = node_name(node), previous, node
        others = [a for a in node.args if a is not carried]
        if name in SCORE_VIEWS:
            view = node
            continue
        if name in MULTIPLY_SCALES | DIVIDE_SCALES:
            factor = _number(others[0], value_of) if len(others) == 1 and len(node.args) == 2 else None
            if name in DIVIDE_SCALES and node.args[0] is not carried:
                factor = None  # c / scores is no scale
            if factor is None or masks:
                return "a scale after the mask" if masks else "a scale that is not a number"
            scale = scale * factor if name in MULTIPLY_SCALES else scale / factor
            continue
        if name in FILL_MASKS and len(node.args) == 3 and _large_negative(node.args[2], value_of):
            masks.append(("drop", node.args[1], _number(node.args[2], value_of)))
        elif name in WHERE_MASKS and len(node.args) == 3 and _large_negative(node.args[2], value_of):
            masks.append(("keep", node.args[0], _number(node.args[2], value_of)))
        elif name in ADDITIVE_MASKS and len(others) == 1 and isinstance(others[0], torch.fx.Node):
            masks.append(("add", others[0], None))
        elif name in CASTS:
            continue
        else:
            return f"{name} between the scores and the softmax" if name not in MASKS else f"a {name} mask it cannot read"
        masked_in.add(view)
    if len(masks) == 1:
        mask, invert = masks[0][1], masks[0][0] == "drop"
    for node in match.after:
        if node_name(node) in DROPOUT:
            p, training = (list(node.args[1:3]) + [node.kwargs.get("p", 0.5), node.kwargs.get("training", True)])[:2]
            dropout_p = float(p) if training else 0.0
    views = [n for n in (*match.between, *match.after) if node_name(n) in SCORE_VIEWS]
    arguments = {"scale": scale, "dropout_p": dropout_p, "query": query, "key": key, "key_transposed": key_transposed,
                 "value": value}
    if not views and len(masks) <= 1:
        return {**arguments, "mask": mask, "invert_mask": invert, "layouts": layouts}
    return _folded(match, masks, masked_in, value_of, arguments, layouts)


def _folded(match: Any, masks: list, masked_in: set, value_of: Callable[[Any], Any], arguments: dict,
            layouts: Any) -> dict[str, Any] | str:
    """The arguments of ``folded_attention`` for a block whose scores are viewed in another layout, or masked more
    than once; a reason where the views do not bring the weights back to the scores' layout for the matmul with the
    values, or the masks sit in different layouts."""
    if layouts is not None:
        return "an einsum beside views of the scores"
    weights = match.after[-1] if match.after else match.softmax
    scores_value, weights_value = value_of(match.scores), value_of(weights)
    if scores_value is None or weights_value is None:
        return "views of the scores whose shapes are unknown here"
    if tuple(scores_value.shape) != tuple(weights_value.shape):
        return "views that leave the weights in another layout than the scores"
    if len(masked_in - {None}) > 1 or (None in masked_in and len(masked_in) > 1):
        return "masks applied in different layouts"
    view = next(iter(masked_in), None)
    tail = None
    if view is not None:
        shape = getattr(value_of(view), "shape", None)
        if shape is None or len(shape) < 3 or tuple(shape[-2:]) != tuple(scores_value.shape[-2:]):
            return "a view of the scores that changes their last two dimensions"
        tail = tuple(int(size) for size in shape[1:-2])
    return {**arguments, "masks": [(kind, node, fill) for kind, node, fill in masks], "view": tail}


def _operand(node: Any, index: int, keyword: str) -> Any:
    """An fx call's argument given by position or by keyword."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(keyword)



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
