"""TorchDynamo graph breaks: where torch.compile would have to split the model.

What it detects:
    The breaks TorchDynamo reported while capturing the model's forward (the audit captures
    with Dynamo, the front end of ``torch.compile``): each reason, the user line, how often it
    broke there, and how many graphs the forward splits into.

Why it matters:
    At every break ``torch.compile`` stops its graph, returns to Python to run the offending
    code eagerly, and starts a new graph after it. Kernels cannot be fused across the break,
    CUDA graphs (``mode="reduce-overhead"``) cannot span it, and breaks on data-dependent
    values (``.item()``, ``nonzero``, Python branches on tensors) usually also sync the host.
    A model that compiles into one graph is the one that gets the speed-up.

How to fix:
    Per reason: replace ``.item()`` / ``.tolist()`` and branches on tensor values with tensor
    ops (``torch.where``); replace data-dependent shapes (``nonzero``, boolean masks) with
    fixed-size formulations; move logging and printing out of ``forward``; for unsupported
    third-party calls, ``torch.compiler.disable`` them or wrap them as custom ops.
    ``torch._dynamo.explain(model)(x)`` lists the same breaks.

Example:
    Before::

        if x.sum() > 0:          # graph break: a branch on a tensor value
            x = x * 2

    After::

        x = torch.where(x.sum() > 0, x * 2, x)
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label


@rule(
    slug="graph-breaks",
    code="ADV122",
    layer=Layer.MODEL,
    needs=("graph",),
    severity=Severity.LOW,
    thresholds={"medium_graphs": Threshold(3, "graphs the forward splits into that make the finding medium", "count")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    graph = ev.graph
    if graph is None or not graph.breaks:
        yield Clean(why="no graph was captured" if graph is None else
                    f"TorchDynamo captured the forward whole: {graph.graph_count} graph(s), no break")
        return
    breaks = sorted(graph.breaks, key=lambda b: -b.count)
    total = sum(b.count for b in breaks)
    first = breaks[0]
    where = f" at {site_label(first.file, first.line)}" if first.file else ""
    yield Finding(
        severity=Severity.MEDIUM if graph.graph_count >= th.medium_graphs else Severity.LOW,
        message=(f"torch.compile would split the forward into {graph.graph_count} graph(s) at {total} graph break(s) "
                 f"in {len(breaks)} place(s); most often{where}: {first.reason[:140]}"),
        evidence={"graphs": graph.graph_count, "breaks": total, "places": len(breaks),
                  "reasons": [f"{b.reason[:200]} (x{b.count})" for b in breaks[:10]]},
        locations=[Location.at(b.file, b.line, count_per_step=b.count, note=b.reason[:200])
                   for b in breaks[:8] if b.file],
        fix=Fix(summary="remove the breaks so torch.compile captures one graph: tensor ops instead of .item() and "
                        "branches on values, fixed-size ops instead of data-dependent shapes, no printing in forward",
                docs=["https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html#graph-breaks",
                      "https://pytorch.org/docs/stable/torch.compiler_faq.html#identifying-the-cause-of-a-graph-break"]),
    )


check.advice_only("removing a graph break means rewriting the code at the reported lines; "
                  "compile the rewritten model and re-run the audit to measure it")
