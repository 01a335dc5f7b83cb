"""An inference audit of a model left in training mode, with Dropout or BatchNorm active.

What it detects:
    The model's ``training`` flag is still True (the user never called ``.eval()``) while the
    audited step is inference, and the captured graph contains Dropout or BatchNorm layers,
    whose behaviour differs between the modes.

Why it matters:
    In training mode Dropout zeroes activations at random (outputs are wrong and
    non-deterministic) and BatchNorm normalizes with the batch's own statistics and keeps
    updating its running averages: a correctness problem first, and extra work per step.

How to fix:
    Call ``model.eval()`` before inference (and keep ``torch.no_grad()`` or
    ``torch.inference_mode()`` around it).

Example:
    Before::

        model = Model()
        out = model(x)

    After::

        model = Model().eval()
        with torch.inference_mode():
            out = model(x)
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Thresholds, rule

MODE_DEPENDENT = ("Dropout", "BatchNorm", "AlphaDropout", "FeatureAlphaDropout", "SyncBatchNorm", "InstanceNorm")


@rule(slug="train-mode-inference", code="ADV114", layer=Layer.MODEL, needs=("graph",), severity=Severity.MEDIUM)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.target.mode != "inference" or not ev.target.training_flag or ev.graph is None:
        yield Clean(why="a training run" if ev.target.mode != "inference" else "the model is in eval mode"
                    if not ev.target.training_flag else "no graph was captured")
        return
    layers = {}
    for node in ev.graph.calls():
        if node.module_type.startswith(MODE_DEPENDENT) and node.module_path not in layers:
            layers[node.module_path] = node
    if not layers:  # no layer behaves differently in training mode: the flag does not matter
        yield Clean(why="the model is in train mode, but no layer of it behaves differently there (no dropout, "
                        "batch norm)")
        return
    kinds = Counter(node.module_type for node in layers.values())
    yield Finding(
        message=(f"the model is audited for inference but left in training mode, with "
                 f"{', '.join(f'{n} {k}' for k, n in kinds.most_common())} active: Dropout randomizes outputs, "
                 "BatchNorm uses batch statistics and keeps updating its running averages"),
        evidence={"training_flag": True, "mode_dependent_layers": len(layers), "kinds": dict(kinds)},
        locations=[Location.at(node.file, node.line, function=node.module_path, note=node.module_type)
                   for node in list(layers.values())[:5] if node.file],
        fix=Fix(summary="call model.eval() before inference (with torch.inference_mode())",
                docs=["https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval"]),
    )


check.advice_only("model.eval() changes the outputs by design (dropout off, BatchNorm running statistics), "
                  "so equal numerics cannot be the test; it is a correctness fix first")


@check.patch(safe=False, what="model.eval() where get_model() builds the model")
def patch(files, finding):
    """``get_model()`` returns the model in eval mode: dropout off, BatchNorm on its running statistics, so the
    outputs change by design (unsafe: made with --unsafe-fixes)."""
    source = files.read(files.entry)
    return [source.wrap(source.returned_by("get_model"), "{}.eval()")]
