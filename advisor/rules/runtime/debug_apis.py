"""Debugging and profiling tools left running inside the step.

What it detects:
    Calls from user code, while the audited step runs, of: ``torch.autograd.gradcheck`` /
    ``gradgradcheck``, ``torch.profiler.profile`` or ``torch.autograd.profiler.profile``
    (entered or started), ``torch.autograd.profiler.emit_nvtx``, and
    ``torch.cuda.memory._record_memory_history``. (Anomaly detection has its own rule.)

Why it matters:
    These tools are for investigations. gradcheck runs the function many times in float64
    with finite differences; a profiler records every operator (and with stacks or memory
    tracking, far more); emit_nvtx adds a range per op; memory-history recording captures a
    stack trace per allocation. Left in the step, they multiply its cost.

How to fix:
    Remove them from the step, or guard them behind a debug flag or a step schedule (the
    profiler's ``schedule=`` runs it for a few steps only).

Example:
    Before::

        with torch.profiler.profile() as prof:
            loss = model(x).sum()

    After::

        loss = model(x).sum()   # profile a few steps with schedule=..., in a separate run
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.common_sites import removed_call
from advisor.rulekit.helpers import no_calls
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Thresholds, rule

DEBUG_APIS = ("torch.autograd.gradcheck", "torch.autograd.gradgradcheck", "torch.profiler.profile",
              "torch.autograd.profiler.profile", "torch.autograd.profiler.emit_nvtx",
              "torch.cuda.memory._record_memory_history")


@rule(slug="debug-apis", code="ADV126", layer=Layer.RUNTIME, severity=Severity.HIGH)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    sites = ev.call_sites(*DEBUG_APIS, runtime=True)
    if not sites:
        yield Clean(why=no_calls(ev, "debugging tool (gradcheck, a profiler, anomaly checks)"))
        return
    apis = Counter()
    for site in sites:
        apis[site.api] += site.count
    spent = sum(site.ms for site in sites)
    yield Finding(
        message=(f"debugging tools run inside the step: {', '.join(f'{api} ({n}x)' for api, n in apis.items())}"
                 + (f"; {spent:.3g} ms per step inside the calls themselves" if spent >= 0.01 else "")),
        evidence={"apis": dict(apis), "ms_in_calls_per_step": spent},
        locations=[Location.at(s.file, s.line, count_per_step=s.count, note=s.api) for s in sites],
        fix=Fix(summary="remove the debugging calls from the step, or guard them behind a debug flag "
                        "(the profiler: a schedule over a few steps of a separate run)",
                docs=["https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                      "#disable-debugging-apis"]),
    )


check.advice_only("debugging calls are part of the step's code (their results may be used); "
                  "remove them and re-run the audit to measure the step without them")


@check.patch(what="the debugging calls taken out of the step")
def patch(files, finding):
    """Each debugging call the finding names: its statement removed, or its with-statement unwrapped
    (``with torch.profiler.profile():``). A call whose result the code uses is left to the user."""
    changes = []
    for place in finding.locations:
        source = files.read(place.file)
        changes.append(removed_call(source, source.call(place.line, place.note.rsplit(".", 1)[-1])))
    return changes
