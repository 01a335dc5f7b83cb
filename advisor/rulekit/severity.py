"""Severity, decided in one place: from what a rule declares and what its finding measured.

1. A rule's judgement, when it gives one (``Finding.severity``: a sync that costs nothing on a CPU,
   a GPU setting found on a CPU run), else
2. the rule's declared scale: HIGH when the finding's measured share of the step (``Finding.impact``)
   reaches the threshold the rule names in ``high_at``, MEDIUM below it; else its declared severity;
3. then capped by the share the finding explains: at most HIGH from ``severity.high_share`` of the
   step, MEDIUM from ``medium_share``, LOW from ``low_share``, INFO below (noise next to the step's own
   run-to-run variation). The scale is settable like any threshold (``--set severity.high_share=0.2``).
4. A finding pinned only to lines of libraries' files (installed packages, PyTorch, the standard library),
   none of the user's, is at most LOW: nothing in the user's code is shown to change (``UNPLACED_MOST``).
5. After verification, a finding whose own fix measured no gain or a loss is demoted to INFO (``demote``).
"""

from __future__ import annotations

import enum
from typing import Any

from advisor.rulekit.thresholds import Threshold, Thresholds


class Severity(str, enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.INFO: 0, Severity.LOW: 1, Severity.MEDIUM: 2, Severity.HIGH: 3}

SCALE = "severity"  # the owner name of the scale's thresholds in --set
SCALE_THRESHOLDS = {
    "high_share": Threshold(0.10, "share of the step a finding must explain to be HIGH at most"),
    "medium_share": Threshold(0.03, "share of the step for MEDIUM at most (what a careful reviewer still acts on)"),
    "low_share": Threshold(0.01, "share of the step for LOW at most; below it a measured finding is INFO"),
}
DEFAULT_SCALE = Thresholds.resolve(SCALE_THRESHOLDS)
UNPLACED_MOST = Severity.LOW


def at_most(severity: Severity, ceiling: Severity) -> Severity:
    return ceiling if severity.rank > ceiling.rank else severity


def for_share(share: float, scale: Thresholds = DEFAULT_SCALE) -> Severity:
    """The highest severity a finding explaining ``share`` of the step may have."""
    for name, level in (("high_share", Severity.HIGH), ("medium_share", Severity.MEDIUM), ("low_share", Severity.LOW)):
        if share >= scale[name]:
            return level
    return Severity.INFO


def capped(severity: Severity, share: float | None, scale: Thresholds = DEFAULT_SCALE) -> Severity:
    """``severity``, lowered to what the measured share allows (unchanged when not measured)."""
    if share is None:
        return severity
    allowed = for_share(share, scale)
    return allowed if allowed.rank < severity.rank else severity


def decide(declared: Severity, judged: Severity | None, share: float | None, high_at: float | None = None,
           scale: Thresholds = DEFAULT_SCALE) -> Severity:
    """A finding's severity: the rule's judgement of it (``judged``), else HIGH from the rule's ``high_at``
    share and MEDIUM below it, else the rule's ``declared`` severity; capped by the measured ``share``."""
    if judged is None and high_at is not None and share is not None:
        judged = Severity.HIGH if share >= high_at else Severity.MEDIUM
    return capped(judged or declared, share, scale)


def demote(finding: Any) -> None:
    """A finding whose own fix measured no gain or a loss here is not handed over as a costly item: it
    becomes INFO, says what was measured, and its estimated share is replaced by what the measurement
    allows (the most the fix could save)."""
    v = finding.verification
    measured_share = max(0.0, 1 - 1 / v.ci_high) if v.ci_high else 0.0
    estimate = (f"; the rule's estimate of {finding.impact:.0%} of the step was more than the fix can recover "
                f"(at most {measured_share:.0%} by this measurement)") if finding.impact and finding.impact > measured_share else ""
    finding.severity_before_demotion = finding.severity
    finding.severity = Severity.INFO
    finding.demoted = (f"its fix measured {'slower' if v.status == 'slower' else 'no gain'} here "
                       f"({v.speedup:.2f}x [{v.ci_low:.2f}-{v.ci_high:.2f}]): the pattern is real, "
                       f"but not costly on this machine at this size{estimate}")
    if finding.impact is not None:
        finding.impact = round(min(finding.impact, measured_share), 4)
