"""What a fix author imports: new Targets from old ones, step switches, graph-rewrite helpers.

A fix returns a NEW Target and never changes the one it is given. Baseline and candidate run
interleaved in one process, so a fix must never leave a global changed either: a switch sets
its value when a candidate step starts and restores the previous one when it ends.

    @check.fix(tolerance=1e-3, what="cudnn.benchmark on", needs_cuda="cuDNN autotuning is CUDA-only")
    def fix(target, finding):
        return with_switches(target, attribute(torch.backends.cudnn, "benchmark", True))

Importing this module imports no torch: rule files load it for offline trace analysis too.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterator

from advisor.opnames import target_name
from advisor.sources import innermost_user_frame

if TYPE_CHECKING:
    import torch


def replace_target(target: Any, **changes: Any) -> Any:
    """A new Target with some fields changed (autocast_dtype, compile_mode, channels_last, ...)."""
    return dataclasses.replace(target, **changes)


def compiled_with(target: Any, backend: Callable[..., Any], **changes: Any) -> Any:
    """A new Target whose model runs through torch.compile with this backend (a graph rewrite)."""
    return dataclasses.replace(target, compile_backend=backend, **changes)


def with_switches(target: Any, *switches: Callable[[], contextlib.AbstractContextManager]) -> Any:
    """A new Target whose steps run inside these switches as well (the given one is not changed)."""
    return dataclasses.replace(target, step_contexts=(*target.step_contexts, *switches))


def attribute(owner: Any, name: str, value: Any) -> Callable[[], contextlib.AbstractContextManager]:
    """``owner.name = value`` during the step (``torch.backends.cudnn``, ``"benchmark"``, True)."""
    @contextlib.contextmanager
    def switched() -> Iterator[None]:
        previous = getattr(owner, name)
        setattr(owner, name, value)
        try:
            yield
        finally:
            setattr(owner, name, previous)
    return switched


def setting(get: Callable[[], Any], put: Callable[[Any], None], value: Any) -> Callable[[], contextlib.AbstractContextManager]:
    """A setting behind getter and setter functions (``torch.get_num_threads`` / ``set_num_threads``)."""
    @contextlib.contextmanager
    def switched() -> Iterator[None]:
        previous = get()
        put(value)
        try:
            yield
        finally:
            put(previous)
    return switched


def with_threads(target: Any, threads: int) -> Any:
    """A new Target whose steps run with ``threads`` intra-op threads (the thread-count rules' one fix)."""
    import torch

    return with_switches(target, setting(torch.get_num_threads, torch.set_num_threads, threads))


def silenced(owner: Any, name: str, result: Any = None) -> Callable[[], contextlib.AbstractContextManager]:
    """Replace the function ``owner.name`` by one that does nothing and returns ``result``.

    Measures what a call costs the step (a synchronous ``torch.save``): the gain of moving it
    off the step, as an upper bound.
    """
    return attribute(owner, name, lambda *args, **kwargs: result)


# --- graph rewrites: torch.compile backends that edit the captured torch.fx graph -------------

def node_name(node: "torch.fx.Node") -> str:
    """The name patterns use for a node's target (``matmul``, ``F.softmax``, ``torch.where``)."""
    return target_name(node.target) if node.op.startswith("call") else ""


def node_site(node: "torch.fx.Node") -> tuple[str, int]:
    """The user's file and line that created a node (from Dynamo's stack trace)."""
    file, line, _ = innermost_user_frame(node.meta.get("stack_trace") or "")
    return file, line


def finish_graph(graph_module: "torch.fx.GraphModule") -> Callable[..., Any]:
    """Drop what the rewrite left unused, check the graph, and return the new forward."""
    graph_module.graph.eliminate_dead_code()
    graph_module.graph.lint()
    graph_module.recompile()
    return graph_module.forward
