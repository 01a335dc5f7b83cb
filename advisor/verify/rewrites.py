"""Graph rewrites used as torch.compile backends by fixes (layout-only: values cannot change)."""

from __future__ import annotations

from typing import Any, Callable

import torch


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
