"""The model's graph as TorchDynamo captured it, and the step's FLOPs as the counter counted them: the evidence the
graph rules read (``advisor.evidence`` shares them)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from advisor.records import Field, Record

if TYPE_CHECKING:
    import networkx as nx

    from advisor.trace.model import Trace


class GraphNode(Record):
    id: str
    graph: int
    op: str
    target: str
    args: list[str] = Field(default_factory=list, description="ids of the nodes this one reads")
    shape: list[int] | None = None
    stride: list[int] | None = None
    dtype: str | None = None
    contiguous: bool | None = None
    channels_last: bool | None = None
    device: str | None = None
    constants: list[str] = Field(default_factory=list, description="non-tensor arguments, as short text")
    module_path: str = ""
    module_type: str = ""
    file: str = ""
    line: int = 0
    code: str = ""
    value_kind: str = Field(default="", description="for a model buffer: 'lower-triangular' or "
                                                    "'upper-triangular' (a causal mask) when its values are")


class GraphBreak(Record):
    reason: str
    file: str = ""
    line: int = 0
    code: str = ""
    count: int = Field(default=1, description="times Dynamo broke here (once per traced frame)")


class GraphCapture(Record):
    """The model's forward as TorchDynamo saw it; nodes of all captured graphs."""

    method: str = Field(default="dynamo", description="'dynamo' (the whole forward) or 'dynamo-submodules'")
    graph_count: int = 0
    nodes: list[GraphNode] = Field(default_factory=list)
    breaks: list[GraphBreak] = Field(default_factory=list)
    note: str = Field(default="", description="why the capture is partial, when it is")

    @cached_property
    def digraph(self) -> nx.DiGraph:
        """Nodes keyed by id with their GraphNode under ``"node"``; edges run producer -> user."""
        import networkx as nx  # graph rules only: a trace analysis should not pay its import

        graph = nx.DiGraph()
        for node in self.nodes:
            graph.add_node(node.id, node=node)
        for node in self.nodes:
            for source in node.args:
                if source in graph:
                    graph.add_edge(source, node.id)
        return graph

    def calls(self) -> list[GraphNode]:
        return [n for n in self.nodes if n.op in ("call_function", "call_method", "call_module")]


class FlopCount(Record):
    """FLOPs of one whole step (forward, and backward in training), by operator."""

    total: int = 0
    by_op: dict[str, int] = Field(default_factory=dict)
    method: str = Field(default="trace", description="'trace' (the profiled operators' recorded shapes), 'step' "
                                                     "(counted by torch's FLOP counter over a step: earlier "
                                                     "evidence), 'forward x3' (estimated from a forward) or 'none' "
                                                     "(not counted: the note says why)")
    note: str = Field(default="", description="why the step could not be counted, when it could not")

    @property
    def counted(self) -> bool:
        return self.method != "none"

    @classmethod
    def of_trace(cls, trace: Trace) -> FlopCount:
        """The work of the step the profiler recorded: every matmul, convolution and fused attention it ran, forward
        and backward, from the shapes of their inputs (``trace/roofline.py``). The user's run observed, not a
        second call of the model: keyword-only models, gradient accumulation and a step's own loss count as run."""
        from advisor.trace.roofline import formula_flops

        by_op = formula_flops(trace)
        if by_op is None:
            return cls(method="none", note="the trace was recorded without the operators' shapes (record_shapes)")
        return cls(total=int(sum(by_op.values())), by_op={name: int(flops) for name, flops in by_op.items()},
                   method="trace")
