"""Autograd anomaly detection left on.

What it detects:
    ``torch.autograd.set_detect_anomaly(True)`` (or ``detect_anomaly()``) active while the step
    runs, read from the environment after the model file was imported.

Why it matters:
    Anomaly mode records a Python stack trace for every operation of the forward pass and checks
    every backward result for NaN: a debugging aid that slows training steps several-fold. It is
    easy to forget after a debugging session.

How to fix:
    Remove the call, or guard it behind a debug flag.

Example:
    Before::

        torch.autograd.set_detect_anomaly(True)

    After::

        torch.autograd.set_detect_anomaly(os.environ.get("DEBUG_NAN") == "1")
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.common_sites import removed_call
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Thresholds, rule


@rule(slug="anomaly-detection", code="ADV113", layer=Layer.RUNTIME, needs=("env",), severity=Severity.HIGH)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.env is None or not ev.env.anomaly_detection:
        yield Clean(why="autograd anomaly detection is off")
        return
    training = ev.target.mode == "train"
    yield Finding(
        severity=Severity.HIGH if training else Severity.LOW,
        message=("autograd anomaly detection is on: every op records a stack trace and every backward result is "
                 "checked for NaN" + ("" if training else " (it costs most in training; this audit is inference)")),
        evidence={"anomaly_detection": True, "mode": ev.target.mode},
        fix=Fix(summary="remove torch.autograd.set_detect_anomaly(True), or enable it only behind a debug flag",
                docs=["https://pytorch.org/docs/stable/autograd.html#anomaly-detection"]),
    )


@check.fix(tolerance=1e-6, what="anomaly detection off in the step")
def fix(target, finding):
    """Run the step with anomaly mode off: the same math, without the bookkeeping."""
    return replace_target(target, detect_anomaly=False)


ANOMALY_CALLS = ("set_detect_anomaly", "detect_anomaly")


@check.patch(what="anomaly detection switched off")
def patch(files, finding):
    """The one ``torch.autograd.set_detect_anomaly(True)`` (or ``with detect_anomaly():``) in the entry
    file, taken out. Several, or none there (it is switched on elsewhere): not edited."""
    source = files.read(files.entry)
    return [removed_call(source, source.only_call(ANOMALY_CALLS))]
