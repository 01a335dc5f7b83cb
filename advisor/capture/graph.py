"""The model's forward as TorchDynamo captures it: nodes with shapes, strides, modules, lines.

``torch.fx.symbolic_trace`` fails on most real models (asserts on sizes, data-dependent
branches) and can write proxies into a model's attributes; Dynamo traces them, splitting the
graph where it must, and tells why (the graph breaks). Always run on a deep copy.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch

from advisor.evidence import GraphBreak, GraphCapture, GraphNode
from advisor.opnames import target_name
from advisor.sources import innermost_user_frame, is_library_path, third_party


def capture_graph(model: torch.nn.Module, inputs: Any) -> GraphCapture:
    """Trace ``model`` (a copy the caller owns) with Dynamo's explain; raise on failure."""
    if isinstance(inputs, dict):
        return capture_call(model, (), inputs)
    if isinstance(inputs, (tuple, list)):
        return capture_call(model, tuple(inputs), {})
    return capture_call(model, (inputs,), {})


def capture_call(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> GraphCapture:
    """Trace ``model(*args, **kwargs)``; raise when Dynamo fails or captures nothing. Runs of identical blocks are
    traced twice each and copied for the rest, where the capture shows that this gives the same graph
    (capture/repeats.py)."""
    from advisor.capture.repeats import expand, find_runs, truncated

    if runs := find_runs(model):
        with truncated(model, runs):
            try:
                capture = _dynamo_capture(model, args, kwargs)
            except Exception:  # noqa: BLE001 - a forward that needs every block (indexes them): capture it whole
                capture = None
        if capture is not None and capture.graph_count == 1 and not capture.breaks:
            if (nodes := expand(capture.nodes, runs)) is not None:
                capture.nodes = nodes
                return capture
    return _dynamo_capture(model, args, kwargs)


def _dynamo_capture(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> GraphCapture:
    import torch._dynamo as dynamo

    for name in ("torch._dynamo", "torch._inductor", "torch.fx.experimental.symbolic_shapes"):
        logging.getLogger(name).setLevel(logging.ERROR)
    dynamo.reset()
    try:
        explained = dynamo.explain(model)(*args, **kwargs)
    finally:
        dynamo.reset()  # later stages must run the model eagerly
    if not explained.graphs and not explained.break_reasons:
        raise RuntimeError("TorchDynamo captured no graph: the forward was skipped or fell back to eager "
                           "execution under tracing")
    capture = GraphCapture(method="dynamo", graph_count=len(explained.graphs))
    kinds = buffer_kinds(model)
    for index, graph_module in enumerate(explained.graphs):
        capture.nodes.extend(_nodes(index, graph_module, kinds))
    seen: dict[tuple[str, str, int], GraphBreak] = {}
    for reason in explained.break_reasons:
        found = _graph_break(reason)
        key = (found.reason, found.file, found.line)
        if key in seen:
            seen[key].count += 1
        else:
            seen[key] = found
            capture.breaks.append(found)
    return capture


def _nodes(index: int, graph_module: torch.fx.GraphModule, buffer_kind: dict[str, str]) -> list[GraphNode]:
    nodes = []
    for node in graph_module.graph.nodes:
        value = node.meta.get("example_value")
        module_path, module_type = _module(node.meta.get("nn_module_stack"))
        file, line, code = source_of(node.meta.get("stack_trace") or "")
        entry = GraphNode(
            id=f"g{index}:{node.name}", graph=index, op=node.op, target=target_name(node.target),
            args=[f"g{index}:{arg.name}" for arg in node.all_input_nodes],
            module_path=module_path, module_type=module_type, file=file, line=line, code=code,
            constants=_constants(node),
            value_kind=buffer_kind.get(_buffer_key(node), "") if node.op in ("placeholder", "get_attr") else "",
        )
        if isinstance(value, torch.Tensor):
            _describe_tensor(entry, value)
        nodes.append(entry)
    return nodes


# Dynamo names a lifted buffer after its path: L['self'].h[0].attn.mask -> l_self_modules_h_modules_0_
# modules_attn_buffers_mask_. Dropping the path's structural words leaves the buffer's own name.
_PATH_WORDS = frozenset({"l", "fn", "self", "modules", "buffers", "_modules", "_buffers"})
TRIANGLE_MAX_ELEMENTS = 1 << 24  # buffers larger than this are not inspected


def _buffer_key(node: torch.fx.Node) -> str:
    name = str(node.target).lower()
    if "buffers" not in name.split("_"):
        return ""
    return "_".join(word for word in name.split("_") if word and word not in _PATH_WORDS)


def buffer_kinds(model: torch.nn.Module) -> dict[str, str]:
    """Model buffers whose values form a causal mask, keyed as Dynamo names them (see _buffer_key)."""
    kinds = {}
    for name, buffer in model.named_buffers():
        if (kind := triangle_kind(buffer)) is not None:
            kinds[name.lower().replace(".", "_")] = kind
    return kinds


def triangle_kind(value: torch.Tensor) -> str | None:
    """'lower-triangular' when the non-zero entries of the last two (square) dimensions are exactly
    the lower triangle in every slice, 'upper-triangular' for the strict or full upper one."""
    if value.dim() < 2 or value.shape[-1] != value.shape[-2] or value.numel() > TRIANGLE_MAX_ELEMENTS \
            or value.shape[-1] < 2 or value.is_complex():
        return None
    size = value.shape[-1]
    nonzero = (value != 0).reshape(-1, size, size)
    lower = torch.ones(size, size, dtype=torch.bool, device=value.device).tril()
    if bool((nonzero == lower).all()):
        return "lower-triangular"
    if bool((nonzero == ~lower).all()) or bool((nonzero == lower.T).all()):
        return "upper-triangular"
    return None


def _describe_tensor(entry: GraphNode, value: torch.Tensor) -> None:
    try:
        entry.shape = [int(s) for s in value.shape]
        entry.stride = [int(s) for s in value.stride()]
        entry.dtype = str(value.dtype).replace("torch.", "")
        entry.contiguous = bool(value.is_contiguous())
        entry.device = str(value.device)
        if value.dim() == 4:
            entry.channels_last = bool(value.is_contiguous(memory_format=torch.channels_last))
    except (RuntimeError, TypeError):  # symbolic sizes, sparse layouts
        pass


def _constants(node: torch.fx.Node) -> list[str]:
    """Arguments that are not graph values (dtypes, sizes, flags), as short text; kwargs as name=value."""
    def text(value: Any) -> str:
        return repr(value)[:60]
    found = [text(a) for a in node.args if not isinstance(a, torch.fx.Node) and not _holds_node(a)]
    found += [f"{k}={text(v)}" for k, v in node.kwargs.items() if not isinstance(v, torch.fx.Node) and not _holds_node(v)]
    return found


def _holds_node(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, torch.fx.Node) or _holds_node(v) for v in value)
    return False


def _module(stack: dict | None) -> tuple[str, str]:
    if not stack:
        return "", ""
    path, module_type = list(stack.values())[-1]
    path = re.sub(r"^L\['[^']+'\]\.?", "", str(path))
    path = re.sub(r"\[\s*'([^']+)'\s*\]", r".\1", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\._modules\.", ".", path).strip(".")
    name = getattr(module_type, "__qualname__", None) or str(module_type)
    return path, name


def source_of(stack_trace: str) -> tuple[str, int, str]:
    """The user's innermost frame in a node's stack trace (file, line, code), else the installed library's whose
    model it is (a transformers or diffusers module): the rules' findings there are the library's, kept LOW."""
    return innermost_user_frame(stack_trace, library_fallback=True)


def _graph_break(reason: Any) -> GraphBreak:
    text = str(getattr(reason, "reason", reason)).strip()
    summary = text.splitlines()[0] if text else "graph break"
    stack = getattr(reason, "user_stack", []) or []
    frames = [f for f in stack if not is_library_path(f.filename)] or [f for f in stack if third_party(f.filename)]
    if not frames:  # the user's innermost frame, else the installed library's whose model breaks
        return GraphBreak(reason=summary)
    frame = frames[-1]
    return GraphBreak(reason=summary, file=frame.filename, line=frame.lineno or 0, code=(frame.line or "").strip())
