"""Which findings' fixes to measure, in what order, and what is decided without running anything.

Pure: reads findings and the rule set's fix declarations, runs no model. A finding whose rule has
no fix, only advice, or a fix that needs CUDA on a CPU run, is reported as expected with the
declared reason; the rest go to the measuring stage in order of their share of the step.
"""

from __future__ import annotations

from advisor.records import Field, Record
from advisor.rulekit.engine import RuleSet
from advisor.rulekit.rule import Finding, Verification, expected_gain


class MeasuredFixes(Record):
    """Verification results by finding id, and all verified fixes measured together."""

    results: dict[str, Verification] = Field(default_factory=dict)
    combined: Verification | None = None
    apart: list[str] = Field(default_factory=list, description="verified fixes that cannot join the others "
                                                               "(a memory fix, a source patch), by rule")


def plan_verification(findings: list[Finding], ruleset: RuleSet, device: str,
                      patches: bool = False) -> tuple[list[Finding], MeasuredFixes]:
    """(findings to measure, in order of expected gain: by severity, then by the share of the step they
    explain, so a budget that runs out never skips a HIGH finding for a lesser one; results decided here
    without running). ``patches``: the entry point measures a patched copy of the source, so a rule whose fix
    exists only as its edit (``Rule.patch_measured``) is measured too."""
    decided = MeasuredFixes()
    to_measure = []
    for finding in sorted(findings, key=expected_gain):
        rule = ruleset.get(finding.slug)
        spec = rule.fix_spec if rule is not None else None
        reason = spec.unmeasurable(finding, device) if spec is not None else \
            "no automatic fix for this rule; apply the fix by hand"
        if reason is None or (patches and rule is not None and rule.patch_measured):
            to_measure.append(finding)
        else:
            decided.results[finding.id] = Verification(status="not-verifiable-here", device=device, note=reason)
    return to_measure, decided
