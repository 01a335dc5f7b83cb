"""DDP searches for unused parameters that every step uses.

What it detects:
    A DistributedDataParallel model built with ``find_unused_parameters=True`` (seen in a
    torchrun job under ``advisor run``) while every parameter received a gradient in every
    watched step and DDP itself found no unused parameter.

Why it matters:
    With the flag on, DDP walks the autograd graph from the outputs after every forward to
    mark the parameters that will get no gradient, and cannot all-reduce a bucket until
    backward has finished with every parameter it holds; when nothing is ever unused, that
    traversal and the delayed communication are pure cost (PyTorch warns about it).

How to fix:
    Build DDP with ``find_unused_parameters=False`` (the default). Keep it on only for a model
    whose forward really skips parameters (a branch, a frozen head), or use ``static_graph=True``
    when the set of used parameters never changes.

Example:
    Before::

        model = DistributedDataParallel(net, find_unused_parameters=True)

    After::

        model = DistributedDataParallel(net)
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.common_sites import at_ddp_call
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Thresholds, rule

DOCS = ["https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html"]


@rule(slug="find-unused-parameters", code="ADV134", layer=Layer.APPLICATION, needs=("ddp",), severity=Severity.MEDIUM)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    ddp = ev.ddp
    if ddp is None or not ddp.find_unused_parameters or ddp.steps_watched == 0:
        yield Clean(why="no DDP model with find_unused_parameters=True was watched" if ddp is None or
                    not ddp.find_unused_parameters else "no DDP step was watched")
        return
    if ddp.unused_parameter_bytes or ddp.steps_with_missing_grads:  # the flag is needed
        yield Clean(why="find_unused_parameters=True is needed: some parameter really goes unused")
        return
    yield Finding(
        message=(f"DDP is built with find_unused_parameters=True, yet every parameter received a gradient in all "
                 f"{ddp.steps_watched} watched steps and DDP found none unused: each step pays a traversal of the "
                 "autograd graph and all-reduces only after backward is done with every bucket's parameters"),
        evidence={"find_unused_parameters": True, "steps_watched": ddp.steps_watched, "unused_parameter_bytes": 0},
        locations=[Location.at(ddp.file, ddp.line)] if ddp.file else [],
        fix=Fix(summary="build DDP with find_unused_parameters=False (the default)",
                docs=DOCS),
    )


@check.fix(tolerance=1e-5, what="find_unused_parameters=False")
def fix(target, finding):
    """Build DDP without the search: the same gradients, all-reduced as soon as each bucket is ready."""
    return replace_target(target, ddp_options={**target.ddp_options, "find_unused_parameters": False})


@check.patch(what="find_unused_parameters=False at the DistributedDataParallel(...) call")
def patch(files, finding):
    return at_ddp_call(files, finding, find_unused_parameters=False)
