"""cuDNN autotuning off for a convolutional network with fixed input shapes, on CUDA.

What it detects:
    An audit on a CUDA device where ``torch.backends.cudnn.benchmark`` is False while the
    model runs convolutions (Conv modules or ``F.conv*`` in the captured graph, or cuDNN
    convolution ops in the trace) on inputs whose shapes do not change between steps.

Why it matters:
    Without benchmarking, cuDNN picks a convolution algorithm by heuristics. With it, the
    first call for each input shape times the available algorithms and caches the fastest;
    for fixed shapes every later step uses it. Gains of 10-30% on conv nets are common.

How to fix:
    Set ``torch.backends.cudnn.benchmark = True`` once at start-up. Leave it off when input
    shapes change every step (variable image sizes, ragged batches): each new shape pays the
    search again.

Example:
    Before::

        model = resnet50().cuda()

    After::

        torch.backends.cudnn.benchmark = True
        model = resnet50().cuda()
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.fixing import attribute, with_switches
from advisor.rulekit.helpers import convolution_sites
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Thresholds, rule


@rule(slug="cudnn-benchmark", code="ADV123", layer=Layer.RUNTIME, needs=("cuda", "env"), severity=Severity.MEDIUM)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    env = ev.env
    if not ev.on_cuda or env is None or env.cudnn_benchmark is not False or env.cudnn_enabled is False:
        # CPU audits have no cuDNN; a recorded trace does not say how the flag was set
        yield Clean(why="no CUDA device in this run" if not ev.on_cuda else "the cuDNN flags were not recorded"
                    if env is None else "cudnn.benchmark is on, or cuDNN is disabled")
        return
    convs = convolution_sites(ev)
    if not convs:
        yield Clean(why="the model runs no convolution")
        return
    yield Finding(
        message=(f"torch.backends.cudnn.benchmark is off while the model runs {len(convs)} convolution(s) on "
                 f"{env.device_name or 'CUDA'} with fixed input shapes: cuDNN picks algorithms by heuristics "
                 "instead of timing them once"),
        evidence={"cudnn_benchmark": False, "convolutions": len(convs), "device": env.device_name},
        locations=[Location.at(file, line, function=where) for file, line, where in convs[:5] if file],
        fix=Fix(summary="set torch.backends.cudnn.benchmark = True at start-up (input shapes are fixed)",
                docs=["https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                      "#enable-cudnn-auto-tuner"]),
    )


@check.fix(tolerance=1e-3, what="cudnn.benchmark on", needs_cuda="cuDNN autotuning applies to CUDA devices only")
def fix(target, finding):
    """Let cuDNN time its algorithms (different algorithms reorder float sums: 1e-3)."""
    import torch

    return with_switches(target, attribute(torch.backends.cudnn, "benchmark", True))


@check.patch(what="torch.backends.cudnn.benchmark = True at the top of the entry file")
def patch(files, finding):
    source = files.read(files.entry)
    return source.with_torch([source.after_imports("torch.backends.cudnn.benchmark = True")])
