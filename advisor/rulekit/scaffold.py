"""``advisor rules new SLUG``: a new rule's file, written whole, and its positive and negative samples.

The rule file has every part a rule needs (its documentation's four sections, the evidence it reads,
its thresholds, a margin reported when it stays silent, a finding at the user's lines, its fix) as a
small working rule: it finds calls of ``torch.cumsum`` in the captured graph. The samples say what they
expect (``# expect: SLUG`` at the line, ``# expect nothing``), the same annotations the built-in
samples carry, so the rule can be tried at once:
``advisor audit FOLDER/samples/SLUG_positive.py --rules FOLDER``.
"""

from __future__ import annotations

import os

RULE = '''"""Calls of torch.cumsum in the step (replace with what your rule finds).

What it detects:
    Each call of ``torch.cumsum`` in the model's captured graph, at the user's line.

Why it matters:
    Say what it costs and when: the share of the step, the device it matters on.

How to fix:
    Say what to change, in the user's code.

Example:
    Before::

        total = torch.cumsum(x, dim=1)

    After::

        total = x.sum(dim=1)   # when only the last element is used
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence, Location, Margin
from advisor.rulekit.rule import Finding, Fix, Layer, Severity, Threshold, Thresholds, rule

TARGETS = frozenset({{"torch.cumsum", "cumsum"}})  # graph targets, named as advisor.opnames.target_name names them


@rule(slug="{slug}", code="{code}", layer=Layer.{layer}, needs=("graph",), severity=Severity.LOW,
      thresholds={{"min_calls": Threshold(1, "calls in the step before it is reported", "count")}})
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    calls = [node for node in ev.graph.calls() if node.target in TARGETS]
    yield Margin(quantity="calls in the step", value=len(calls), threshold=th.min_calls, noise=0.0)
    if len(calls) < th.min_calls:
        return  # nothing to report
    yield Finding(
        message=f"{{len(calls)}} call(s) of torch.cumsum in the step",
        evidence={{"calls": len(calls)}},
        locations=[Location.at(node.file, node.line) for node in calls if node.file],
        fix=Fix(summary="replace the cumulative sum where only its total is read"),  # the Example is the snippet
    )


check.advice_only("a change of the user's code: no automatic fix")
'''

POSITIVE = '''"""A model that {slug} reports (a positive sample: the comment on the line it must point at says so)."""

import torch
from torch import nn


class Running(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x):
        y = self.proj(x)
        return torch.cumsum(y, dim=1)[:, -1]  # expect: {slug}


def get_model():
    return Running().eval()


def get_inputs():
    return torch.randn(8, 64)
'''

NEGATIVE = '''"""The same model without what {slug} reports (a negative sample)."""

import torch
from torch import nn


class Summed(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x):
        return self.proj(x).sum(dim=1)


def get_model():
    return Summed().eval()


def get_inputs():
    return torch.randn(8, 64)
# expect nothing
'''

LAYERS = ("hardware", "runtime", "model", "application")


def scaffold(slug: str, code: str, layer: str, folder: str) -> list[str]:
    """Write the rule and its two samples into ``folder``; the paths written. Refuses to overwrite."""
    name = slug.replace("-", "_")
    files = {os.path.join(folder, f"{name}.py"): RULE.format(slug=slug, code=code, layer=layer.upper()),
             os.path.join(folder, "samples", f"{name}_positive.py"): POSITIVE.format(slug=slug),
             os.path.join(folder, "samples", f"{name}_negative.py"): NEGATIVE.format(slug=slug)}
    existing = [path for path in files if os.path.exists(path)]
    if existing:
        raise FileExistsError(f"{existing[0]} exists already: advisor rules new writes only new files")
    for path, text in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return list(files)
