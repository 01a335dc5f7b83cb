"""Gradients zeroed in place instead of set to None.

What it detects:
    ``optimizer.zero_grad(set_to_none=False)`` (or ``model.zero_grad(False)``) in the user's
    code: seen running in the step, or written in the model file (a training loop the audit
    does not run).

Why it matters:
    Zeroing writes every gradient tensor with zeros each step (a memset as large as the
    model), and the next backward then accumulates into them (a read-add-write instead of a
    plain write). ``set_to_none=True``, the default since PyTorch 2.0, frees the gradients
    and lets backward write them fresh: less memory traffic and lower peak memory.

How to fix:
    Call ``zero_grad()`` (or ``zero_grad(set_to_none=True)``). Code that reads ``.grad``
    between steps must then accept ``None``.

Example:
    Before::

        optimizer.zero_grad(set_to_none=False)

    After::

        optimizer.zero_grad()   # set_to_none=True
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.common_sites import at_call_sites
from advisor.rulekit.fixing import attribute, with_switches
from advisor.rulekit.helpers import no_calls
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Thresholds, rule

API = "zero_grad"  # Optimizer.zero_grad and Module.zero_grad


@rule(slug="zero-grad", code="ADV128", layer=Layer.APPLICATION, severity=Severity.LOW)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    sites = [s for s in ev.call_sites(API) if s.arguments.get("set_to_none") == "False"]
    if not sites:
        yield Clean(why=no_calls(ev, "zero_grad(set_to_none=False)"))
        return
    params = ev.target.param_count
    yield Finding(
        message=(f"gradients are zeroed in place (zero_grad(set_to_none=False)) at {len(sites)} place(s): "
                 f"every step writes zeros over {params:,} gradient values and backward then accumulates into them"),
        evidence={"sites": len(sites), "seen_in_step": any(s.runtime for s in sites), "parameters": params},
        locations=[Location.at(s.file, s.line, note="runs in the step" if s.runtime else "in the source")
                   for s in sites],
        fix=Fix(summary="call zero_grad() with the default set_to_none=True",
                docs=["https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html",
                      "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                      "#use-parameter-grad-none-instead-of-model-zero-grad-or-optimizer-zero-grad"]),
    )


def _only_in_source(finding: Finding) -> str | None:
    if finding.evidence["seen_in_step"]:
        return None
    return ("the call is in your training loop, which the audit does not run; advisor's own step "
            "already uses zero_grad() with set_to_none=True")


@check.fix(tolerance=1e-6, what="zero_grad(set_to_none=True)", expected=_only_in_source)
def fix(target, finding):
    """Calls seen in the step run with set_to_none=True; calls only in the source cannot be measured."""
    import torch

    def to_none(original):
        return lambda self, set_to_none=True: original(self, set_to_none=True)

    return with_switches(target,
                         attribute(torch.optim.Optimizer, "zero_grad", to_none(torch.optim.Optimizer.zero_grad)),
                         attribute(torch.nn.Module, "zero_grad", to_none(torch.nn.Module.zero_grad)))


@check.patch(what="zero_grad() with the default set_to_none=True")
def patch(files, finding):
    """Each ``zero_grad(set_to_none=False)`` (or ``zero_grad(False)``) the finding names, without the argument."""
    def to_default(source, call):
        if any(arg.keyword is not None and arg.keyword.value == "set_to_none" for arg in call.args):
            return source.set_keywords(call, set_to_none=None)
        return source.drop_positional(call, 0)
    return at_call_sites(files, finding, API, to_default)
