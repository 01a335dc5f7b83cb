"""Graph rewrites used as torch.compile backends by fixes (layout-only: values cannot change)."""

from __future__ import annotations

from typing import Any, Callable

import torch

from advisor.patterns import find_constants


def drop_contiguous(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Remove plain ``.contiguous()`` calls: they copy memory and never change a value.

    A consumer that needs contiguous memory (``.view``) then raises, and verification reports
    the fix as failed rather than changing the model's numbers.
    """
    for node in list(graph_module.graph.nodes):
        if node.op == "call_method" and node.target == "contiguous" and len(node.args) == 1 and not node.kwargs:
            node.replace_all_uses_with(node.args[0])
            graph_module.graph.erase_node(node)
    graph_module.graph.lint()
    graph_module.recompile()
    return graph_module.forward


def _site(node: torch.fx.Node) -> tuple[str, int]:
    from advisor.capture.graph import _source

    file, line, _ = _source(node.meta.get("stack_trace") or "")
    return file, line


def _finish(graph_module: torch.fx.GraphModule) -> Callable[..., Any]:
    graph_module.graph.eliminate_dead_code()
    graph_module.graph.lint()
    graph_module.recompile()
    return graph_module.forward


def drop_calls(sites: set[tuple[str, int, str]]) -> Callable[..., Any]:
    """A backend removing the method calls at (file, line, method): each is replaced by its input.

    For calls that return their input's value unchanged (a redundant ``.clone()``); a later
    in-place use would then change the input, which the numerics check would catch.
    """
    def backend(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        for node in list(graph_module.graph.nodes):
            if node.op == "call_method" and (*_site(node), node.target) in sites and node.args:
                node.replace_all_uses_with(node.args[0])
                graph_module.graph.erase_node(node)
        return _finish(graph_module)
    return backend


def constant_nodes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """Nodes computed from constant factory calls only: the same value every step."""
    from advisor.capture.graph import target_name

    calls = [n for n in graph.nodes if n.op in ("call_function", "call_method")]
    return find_constants(calls, name=lambda n: target_name(n.target), is_function=lambda n: n.op == "call_function",
                          inputs=lambda n: n.all_input_nodes, key=lambda n: n)


def fold_constants(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A backend computing constant subgraphs once, at compile time, and reusing their tensors.

    What ``register_buffer`` does by hand: masks, position ids and lookup tables built from
    constants are no longer rebuilt every step.
    """
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
    return _finish(graph_module)


def use_sdpa(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A backend replacing hand-written attention with ``F.scaled_dot_product_attention``.

    Only blocks it can translate exactly are replaced: scales by constants before any mask,
    at most one mask (``masked_fill`` with a large negative value, ``where``, or an added
    float mask), dropout kept as ``dropout_p``. Others are left as they are. A mask whose
    value on the example inputs is the lower triangle becomes ``is_causal=True``, which lets
    SDPA pick its flash kernels.
    """
    from advisor.capture.graph import target_name
    from advisor.patterns import find_attention

    graph = graph_module.graph
    matches = find_attention(list(graph.nodes), name=lambda n: target_name(n.target) if n.op.startswith("call") else "",
                             inputs=lambda n: n.all_input_nodes, users=lambda n: list(n.users))
    plans = [(match, _sdpa_arguments(match, target_name)) for match in matches]
    values = _node_values(graph_module, example_inputs) if any(p and p["mask"] is not None for _, p in plans) else {}
    for match, plan in plans:
        if plan is None:
            continue
        query, key_transposed = match.scores.args[0], match.scores.args[1]
        causal = _is_causal(values.get(plan["mask"]), plan["invert_mask"], values.get(match.scores))
        with graph.inserting_before(match.output):
            key = _untransposed(graph, key_transposed)
            mask = None if causal else plan["mask"]
            if mask is not None and plan["invert_mask"]:
                mask = graph.call_function(torch.logical_not, (mask,))
            attention = graph.call_function(
                torch.nn.functional.scaled_dot_product_attention, (query, key, match.output.args[1]),
                {"attn_mask": mask, "dropout_p": plan["dropout_p"], "is_causal": causal, "scale": plan["scale"]})
        match.output.replace_all_uses_with(attention)
        for node in reversed([match.scores, *match.between, match.softmax, *match.after, match.output]):
            if not node.users:
                graph.erase_node(node)
    return _finish(graph_module)


def _node_values(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> dict[torch.fx.Node, Any]:
    """Every node's value on the example inputs (one extra forward at compile time); {} if that fails."""
    interpreter = torch.fx.Interpreter(graph_module, garbage_collect_values=False)
    try:
        with torch.no_grad():
            interpreter.run(*example_inputs)
    except Exception:  # noqa: BLE001 - symbolic or fake inputs: fall back to explicit masks
        return {}
    return interpreter.env


def _is_causal(mask: Any, inverted: bool, scores: Any) -> bool:
    """Whether a mask keeps exactly the lower triangle of the (L, S) scores: SDPA's ``is_causal``."""
    if not isinstance(mask, torch.Tensor) or not isinstance(scores, torch.Tensor) or mask.dim() < 2:
        return False
    if mask.dtype == torch.bool:
        keep = ~mask if inverted else mask
    elif mask.is_floating_point() and not inverted and bool(((mask == 0) | (mask == float("-inf"))).all()):
        keep = mask == 0  # an additive 0 / -inf mask
    else:
        return False
    rows, cols = scores.shape[-2:]
    if tuple(keep.shape[-2:]) != (rows, cols) or any(size != 1 for size in keep.shape[:-2]):
        return False
    return torch.equal(keep.reshape(rows, cols), torch.ones(rows, cols, dtype=torch.bool, device=keep.device).tril())


def _sdpa_arguments(match: Any, target_name: Callable[[Any], str]) -> dict[str, Any] | None:
    scale, mask, invert, dropout_p = 1.0, None, False, 0.0
    for node in match.between:
        name = target_name(node.target)
        constants = [a for a in node.args[1:] if not isinstance(a, torch.fx.Node)]
        if name in ("mul", "torch.mul", "mul_") and len(constants) == 1 and mask is None:
            scale *= float(constants[0])
        elif name in ("truediv", "torch.div", "div", "div_") and len(constants) == 1 and mask is None:
            scale /= float(constants[0])
        elif name in ("masked_fill", "masked_fill_") and mask is None and len(node.args) == 3 \
                and isinstance(node.args[2], (int, float)) and node.args[2] <= -1e4:
            mask, invert = node.args[1], True
        elif name == "torch.where" and mask is None and len(node.args) == 3 \
                and isinstance(node.args[2], (int, float)) and node.args[2] <= -1e4:
            mask = node.args[0]
        elif name in ("add", "torch.add", "add_") and mask is None and isinstance(node.args[1], torch.fx.Node):
            mask = node.args[1]
        elif name in ("float", "to", "type_as", "half", "bfloat16"):
            continue
        else:
            return None
    for node in match.after:
        if target_name(node.target) in ("F.dropout", "dropout"):
            p, training = (list(node.args[1:3]) + [node.kwargs.get("p", 0.5), node.kwargs.get("training", True)])[:2]
            dropout_p = float(p) if training else 0.0
    return {"scale": scale, "mask": mask, "invert_mask": invert, "dropout_p": dropout_p}


def _untransposed(graph: torch.fx.Graph, key_transposed: torch.fx.Node) -> torch.fx.Node:
    """k from k.transpose(-2, -1); otherwise a transpose of what the matmul was given."""
    if key_transposed.op == "call_method" and key_transposed.target == "transpose" and len(key_transposed.args) == 3:
        rank = len(key_transposed.meta["example_value"].shape) if "example_value" in key_transposed.meta else 4
        dims = {d % rank for d in key_transposed.args[1:] if isinstance(d, int)}
        if dims == {rank - 1, rank - 2}:
            return key_transposed.args[0]
    return graph.call_method("transpose", (key_transposed, -2, -1))
