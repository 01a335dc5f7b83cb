"""The one verification method, for every entry point, on the report's side: plan, decide what needs no run,
have the rest measured (wherever the entry point runs the model: ``verify/orchestrate.py``), bring the results
back to their findings by id, demote what measured no gain, and note what the machine's conditions put in doubt.
"""

from __future__ import annotations

from typing import Callable

from advisor.assembly.quality import note_contended_verifications, note_disagreeing_baselines
from advisor.errors import StageError
from advisor.report.schema import Report
from advisor.rulekit import severity
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Finding, Layer, Verification
from advisor.verify.orchestrate import contended_loss
from advisor.verify.plan import MeasuredFixes, plan_verification


def verification_blocker(errors: list[StageError]) -> str | None:
    """Why fixes must not be measured after this capture, or None: never after a hang or a crash
    (the model may do it again), nor when the step could not be timed or profiled."""
    unsafe = [e for e in errors if e.kind in ("timeout", "crash") or e.stage in ("timing", "trace")]
    if not unsafe:
        return None
    return f"not attempted: the {unsafe[0].stage} stage {unsafe[0].kind}"


def attach_verification(report: Report, measured: MeasuredFixes) -> None:
    """Each finding gets its measured (or decided) Verification, matched by the finding's id."""
    by_id = {finding.id: finding for finding in report.findings}
    for finding_id, result in measured.results.items():
        if finding_id in by_id:
            by_id[finding_id].verification = Verification.model_validate(result)
    report.verification.combined = measured.combined
    report.verification.apart = list(measured.apart)


def verify_findings(report: Report, rules: RuleConfig, errors: list[StageError],
                    measure: Callable[[list[Finding]], MeasuredFixes | str], patches: bool = False) -> None:
    """The one verification method: plan, decide what needs no run, measure the rest.

    ``measure`` runs the measurable fixes wherever the entry point runs the model (the supervised
    child, or this process for the Python API) and returns their results, or a sentence saying
    why it did not finish. ``patches``: it also measures a fix that exists only as an edit of the source,
    on a patched copy (``Rule.patch_measured``).
    """
    if not report.verification.enabled or not report.findings:
        return
    blocker = verification_blocker(errors)
    if blocker is not None:
        report.verification.note = blocker
        return
    to_measure, decided = plan_verification(report.findings, rules.ruleset, report.target.device, patches)
    attach_verification(report, decided)
    if not to_measure:
        return
    outcome = measure(to_measure)
    if isinstance(outcome, str):
        report.verification.note = outcome
    else:
        attach_verification(report, outcome)
        demote_unhelpful(report)
        note_contended_verifications(report)
        note_disagreeing_baselines(report, rules.ruleset.slugs_of(Layer.HARDWARE))


def demote_unhelpful(report: Report) -> None:
    """A finding whose own fix measured no gain or a loss here is not handed over as a costly item:
    it becomes INFO, says what was measured, leaves the impact ranking (and so the executive
    summary), and its estimated share is replaced by what the measurement allows. Not when the fix
    was measured under contention: that verdict may be the machine's, so the finding says so instead."""
    for finding in report.findings:
        v = finding.verification
        if v is None or v.status not in ("no-gain", "slower") or v.speedup is None:
            continue
        if busy := contended_loss(v):  # the machine, not the fix, may have decided it: kept as it was
            finding.unreliable = "; ".join(part for part in (
                finding.unreliable, f"its fix measured {v.status} under contention ({'; '.join(busy)}), so it "
                                    "was not demoted") if part)
            continue
        severity.demote(finding)
    report.findings.sort(key=lambda f: (bool(f.demoted),))  # stable: the ranking otherwise stays
