"""Graph capture by parts, for a forward Dynamo cannot capture whole.

A router loop with ``nonzero()`` and ``if sel.numel():``, a forward under
``torch.compiler.disable``, or a Dynamo error leaves the graph rules blind. The submodules
(each expert, each attention block) usually trace fine on their own: one eager forward records
the arguments each submodule is first called with, then each called child of the model is
captured with them — or, when it cannot be, its own children, down the tree.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map

from advisor.capture.graph import capture_call
from advisor.evidence import GraphCapture
from advisor.workload.target import call_model

MAX_PARTS = 64  # captures, so a model of many tiny modules stays bounded


def capture_by_parts(model: torch.nn.Module, inputs: Any, whole_failure: str) -> GraphCapture:
    """Capture the submodules of ``model`` (a copy the caller owns); raise when none can be."""
    first_calls = _first_calls(model, inputs)
    parts: list[tuple[str, torch.nn.Module, GraphCapture]] = []
    failed: list[str] = []

    def visit(module: torch.nn.Module, path: str) -> None:
        for name, child in module.named_children():
            if len(parts) >= MAX_PARTS:
                return
            child_path = f"{path}.{name}" if path else name
            if id(child) not in first_calls:
                visit(child, child_path)  # a ModuleList, or a module its parent never called directly
                continue
            args, kwargs = first_calls[id(child)]
            try:
                parts.append((child_path, child, capture_call(child, args, kwargs)))
            except Exception:  # noqa: BLE001 - Dynamo raises many types; look one level down
                if not any(True for _ in child.children()):
                    failed.append(child_path)
                visit(child, child_path)

    visit(model, "")
    if not parts:
        raise RuntimeError(f"{whole_failure}; no submodule could be captured on its own either")
    merged = GraphCapture(method="dynamo-submodules")
    for path, child, capture in parts:
        offset = merged.graph_count
        for node in capture.nodes:
            local = node.id.split(":", 1)[1]
            node.id = f"g{node.graph + offset}:{path}:{local}"
            node.args = [f"g{node.graph + offset}:{path}:{arg.split(':', 1)[1]}" for arg in node.args]
            node.graph += offset
            node.module_path = f"{path}.{node.module_path}" if node.module_path else path
            node.module_type = node.module_type or type(child).__qualname__
        merged.nodes.extend(capture.nodes)
        merged.breaks.extend(capture.breaks)
        merged.graph_count += capture.graph_count
    names = ", ".join(path for path, _, _ in parts[:6]) + (", …" if len(parts) > 6 else "")
    merged.note = (f"{whole_failure}; the graph rules read {len(parts)} submodule(s) captured one by one "
                   f"({names}): what the model's own forward does between them is not seen"
                   + (f"; not captured: {', '.join(failed[:4])}" if failed else ""))
    return merged


def _first_calls(model: torch.nn.Module, inputs: Any) -> dict[int, tuple[tuple, dict[str, Any]]]:
    """The (args, kwargs) each submodule is first called with in one eager forward, copied."""
    seen: dict[int, tuple[tuple, dict[str, Any]]] = {}

    def record(module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        if id(module) not in seen:
            seen[id(module)] = tree_map(_copied, (args, kwargs))

    handles = [m.register_forward_pre_hook(record, with_kwargs=True) for m in model.modules() if m is not model]
    try:
        with torch.no_grad():
            call_model(model, inputs)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _copied(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value
