"""fp16/bf16 matrix multiplies with dimensions that are not multiples of 8, on a GPU.

What it detects:
    Half-precision (fp16/bf16) matmuls — ``linear``, ``matmul``, ``bmm``, ``mm`` — whose
    inner (K) or output (N) dimension is not a multiple of ``multiple``, each doing at
    least ``min_mflops`` of work, on a CUDA device: from the captured graph in a live audit,
    or from the operators' input shapes in a recorded trace. Vocabulary projections
    (``vocab_size = 50257``) and odd hidden sizes are the usual causes.

Why it matters:
    Tensor cores process fp16/bf16 tiles whose sides are multiples of 8 elements (16 bytes).
    cuBLAS pads or falls back to slower kernels for other sizes; NVIDIA measures up to
    several-fold slower GEMMs for misaligned shapes. Padding a dimension by a few elements
    costs almost nothing in comparison.

How to fix:
    Pad the dimension up to a multiple of 8 (64 is better still): e.g. a vocabulary of
    50257 to 50304, and ignore the padded logits. For batch and sequence dimensions, pad the
    batch or choose sizes that are multiples of 8.

Example:
    Before::

        self.head = nn.Linear(768, 50257)

    After::

        self.head = nn.Linear(768, 50304)   # padded; logits[..., :50257] are the real ones
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import GRAPH_BIAS_FIRST, GRAPH_MATMULS, LOW_PRECISION_TYPES, REDUCED_DTYPES, TRACE_BIAS_FIRST, TRACE_MATMULS
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule


@rule(
    slug="misaligned-dims",
    code="ADV121",
    layer=Layer.MODEL,
    needs=("cuda", "graph|trace"),
    severity=Severity.MEDIUM,
    thresholds={
        "multiple": Threshold(8, "element multiple tensor cores need for fp16/bf16", "elements"),
        "min_mflops": Threshold(10, "work of one matmul below which its alignment does not matter", "MFLOP"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if not ev.on_cuda:
        yield Clean(why="no CUDA device in this run: tensor-core alignment is a GPU matter")
        return
    misaligned = _from_graph(ev, th) if ev.graph is not None else _from_trace(ev, th)
    if not misaligned:
        yield Clean(why="every reduced-precision matmul's dimensions are multiples of 8, or none runs in reduced "
                        "precision")
        return
    unique = {}
    for file, line, where, m, k, n in misaligned:
        unique.setdefault((file, line, k, n), (where, m))
    (file, line, k, n), (where, m) = next(iter(unique.items()))
    yield Finding(
        message=(f"{len(unique)} half-precision matmul shape(s) have K or N not a multiple of {th.multiple:g}, "
                 f"e.g. {where} (M={m}, K={k}, N={n}): tensor cores run them padded or fall back"),
        evidence={"shapes": [[k_, n_] for (_, _, k_, n_) in unique][:10], "multiple": th.multiple},
        locations=[Location.at(place, number, function=where_, note=f"K={k_}, N={n_}")
                   for (place, number, k_, n_), (where_, _) in list(unique.items())[:6] if place],
        fix=Fix(summary=f"pad the misaligned dimensions up to a multiple of {th.multiple:g} (64 is better); "
                        "ignore the padded outputs",
                docs=["https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/"
                      "index.html#requirements-tc"]),
    )


def _aligned(size: int, multiple: float) -> bool:
    return size % int(multiple) == 0


def _from_graph(ev: Evidence, th: Thresholds) -> list[tuple]:
    nodes = {n.id: n for n in ev.graph.nodes}
    found = []
    autocast = ev.target.autocast in REDUCED_DTYPES
    for node in ev.graph.calls():
        first = 1 if node.target in GRAPH_BIAS_FIRST else 0
        if node.target not in GRAPH_MATMULS or len(node.args) < first + 2 or not node.shape:
            continue
        a, b = nodes.get(node.args[first]), nodes.get(node.args[first + 1])
        if a is None or b is None or not a.shape or not b.shape:
            continue
        if not (autocast or a.dtype in REDUCED_DTYPES):
            continue
        k = a.shape[-1]
        n = b.shape[0] if node.target == "F.linear" else b.shape[-1]
        m = 1
        for size in a.shape[:-1]:
            m *= size
        if 2 * m * k * n / 1e6 >= th.min_mflops and not (_aligned(k, th.multiple) and _aligned(n, th.multiple)):
            found.append((node.file, node.line, node.module_path or node.target, m, k, n))
    return found


def _from_trace(ev: Evidence, th: Thresholds) -> list[tuple]:
    found = []
    if ev.trace is None:
        return found
    for op in ev.trace.step_ops():
        if op.name not in TRACE_MATMULS or not op.input_types or op.input_types[0] not in LOW_PRECISION_TYPES:
            continue
        first = 1 if op.name in TRACE_BIAS_FIRST else 0  # the bias comes first
        a, b = (list(op.input_dims) + [None, None, None])[first:first + 2]
        if not (isinstance(a, list) and isinstance(b, list) and len(a) >= 2 and len(b) >= 2):
            continue
        m, k, n = a[-2], a[-1], b[-1]
        if 2 * m * k * n / 1e6 >= th.min_mflops and not (_aligned(k, th.multiple) and _aligned(n, th.multiple)):
            file, line = (op.src.file, op.src.line) if op.src is not None else ("", 0)
            found.append((file, line, op.name, m, k, n))
    return found


check.advice_only("padding a dimension changes the model's parameters and output shapes; "
                  "and tensor-core alignment can only be measured on a GPU")
