"""A convolution with a bias feeding straight into BatchNorm.

What it detects:
    In the captured graph, a Conv1d/2d/3d layer created with ``bias=True`` whose output goes
    directly into a BatchNorm layer.

Why it matters:
    BatchNorm subtracts the mean of its input, so a constant per-channel bias added just before
    it cancels out: the bias costs a parameter tensor, an add over the whole activation (and its
    gradient) every step, and does nothing.

How to fix:
    Create the convolution with ``bias=False``. For an existing checkpoint, fold the bias into
    the BatchNorm: ``bn.running_mean -= conv.bias``, then drop the bias — exact in eval mode,
    and in training mode too since BatchNorm removes the batch mean.

Example:
    Before::

        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128)

    After::

        nn.Conv2d(64, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128)
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Thresholds, rule

CONVS = ("Conv1d", "Conv2d", "Conv3d")
NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")


@rule(slug="conv-bias-before-bn", code="ADV115", layer=Layer.MODEL, needs=("graph",), severity=Severity.LOW)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.graph is None:
        yield Clean(why="no graph was captured")
        return
    graph, nodes = ev.graph.digraph, {n.id: n for n in ev.graph.nodes}
    pairs = []
    for node in ev.graph.calls():
        if node.module_type not in CONVS or not any("bias" in arg for arg in node.args):
            continue  # no bias input: bias=False already
        for successor in graph.successors(node.id):
            following = nodes[successor]
            if following.module_type in NORMS:
                pairs.append((node, following))
    seen, unique = set(), []
    for conv, norm in pairs:
        if (conv.module_path, norm.module_path) not in seen:
            seen.add((conv.module_path, norm.module_path))
            unique.append((conv, norm))
    if not unique:
        convs = sum(1 for node in ev.graph.calls() if node.module_type in CONVS)
        yield Clean(why=f"no convolution with a bias feeds a BatchNorm ({convs} convolution call(s) in the graph)")
        return
    yield Finding(
        message=(f"{len(unique)} convolution(s) with a bias feed straight into BatchNorm, which cancels the bias: "
                 f"first {unique[0][0].module_path} -> {unique[0][1].module_path}"),
        evidence={"pairs": [f"{c.module_path} -> {n.module_path}" for c, n in unique]},
        # nn.Sequential stacks of library modules have no user frame at forward time: name the module
        locations=[Location.at(c.file, c.line, function=f"module {c.module_path}",
                               note=f"{c.module_type} ({c.module_path}) -> {n.module_type} ({n.module_path})")
                   for c, n in unique[:5]],
        fix=Fix(summary="create these convolutions with bias=False (for a checkpoint: fold the bias into the "
                        "BatchNorm's running_mean)",
                docs=["https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                      "#disable-bias-for-convolutions-directly-followed-by-a-batch-norm"]),
    )


@check.fix(tolerance=1e-4, what="bias folded into BatchNorm")
def fix(target, finding):
    """Fold each conv bias into the following BatchNorm's running mean and remove the bias."""
    pairs = [tuple(pair.split(" -> ")) for pair in finding.evidence["pairs"]]

    def fold(model):
        import torch

        for conv_path, norm_path in pairs:
            conv, norm = model.get_submodule(conv_path), model.get_submodule(norm_path)
            with torch.no_grad():
                if norm.running_mean is not None:
                    norm.running_mean.sub_(conv.bias)
            conv.bias = None

    return replace_target(target, model_transforms=(*target.model_transforms, fold))
