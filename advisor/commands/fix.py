"""``advisor fix MODEL_FILE`` and ``advisor fix -- python train.py``: the findings' fixes as a patch to the
user's source, re-audited.

The audit's findings (a fresh audit, or ``--from`` a saved JSON report) each get their rule's edit
(``advisor.patch.patch_plan``). The patched files are written into a scratch copy of the model's folder, never
the user's, and measured there as a fix is: the patched model against the original in one verification
child (numerics within the rule's tolerance, then interleaved timing and its bootstrap interval), each edit
alone, through the one orchestration. The patched copy is audited again to check the findings are gone, and
the held edits are measured together. An edit that breaks numerics, does not hold a gain, or leaves its
finding in place with no gain verified is dropped, with the reason (a loss measured under contention is no
reason: it may be the machine's); the rest is the patch (``reports/<stem>.patch``, ``git apply``-able from
``root``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from advisor.commands.audit import VERIFY_MARGIN_S, AuditOptions, run_audit
from advisor.files.session import FileSession
from advisor.patch.patch_plan import PatchPlan, plan_patch
from advisor.report.schema import Report
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Finding, SourceEdit, Verification
from advisor.sandbox.specs import VerifySpec, fetch_deadline
from advisor.verify.orchestrate import contended_loss, measure_fixes
from advisor.verify.patched_copy import measure_patched_model, patch_tolerance, patched_copy

# what a measurement leaves in the patch: all but an edit that breaks numerics, fails to run or is measured slower
# (on a machine that was quiet while it was measured)
HELD = ("verified", "no-gain", "inconclusive", "not-verifiable-here", "skipped")


@dataclass(kw_only=True)
class FixOptions(AuditOptions):
    from_report: str = ""  # reuse this audit's findings instead of auditing again
    unsafe: bool = False  # also make the edits that change results by design
    root: str = ""  # the diff's paths are relative to this folder (default: the working directory)
    command: tuple[str, ...] = ()  # advisor fix -- python train.py: the script's command (model_file: its script)


@dataclass
class FixResult:
    report: Report
    plan: PatchPlan
    patch: str  # the unified diff of the held edits
    written: dict[str, str] = field(default_factory=dict)


class ModelFile:
    """How a model file is audited and its patched copy measured: verification children, as ``audit``'s."""

    def __init__(self, options: FixOptions, rules: RuleConfig, progress: Callable[[str], None]):
        self.options, self.rules, self.progress = options, rules, progress
        self.entry = os.path.abspath(options.model_file)

    def audit(self, entry: str, out_dir: str) -> Report:
        """The audit of the user's file (its run is theirs, as ``advisor audit``'s), or of a patched copy (an
        experiment of advisor's: its writes go to a shadow)."""
        options = self.options
        return run_audit(AuditOptions(model_file=entry, out_dir=out_dir, mode=options.mode, device=options.device,
                                      timeout=options.timeout, verify=False, rule_dirs=options.rule_dirs,
                                      settings=options.settings, disabled=options.disabled,
                                      experiment=entry != self.entry), self.progress, self.rules).report

    def measure(self, patched: str, label: str, seconds: float, tolerance: float | None, through_loader: bool,
                chosen: list[Finding], files: FileSession) -> Verification:
        options = self.options
        spec = VerifySpec(model_file=self.entry, mode=options.mode, device=options.device,
                          fetch_deadline_s=fetch_deadline(options.timeout), tolerance=tolerance, budget_s=seconds,
                          pairs=options.pairs, through_loader=through_loader)
        timeout = options.timeout if options.pairs else max(options.timeout, seconds + VERIFY_MARGIN_S)
        return measure_patched_model(spec, patched, label, timeout, files, self.progress)


def run_fix(options: FixOptions, progress: Callable[[str], None] = lambda text: None,
            rules: RuleConfig | None = None) -> FixResult:
    rules = rules or RuleConfig.of(options)
    if options.command:
        from advisor.commands.fix_script import Script

        workload = Script(options, rules, progress)
    else:
        workload = ModelFile(options, rules, progress)
    entry = workload.entry
    if options.from_report:
        with open(options.from_report, encoding="utf-8") as handle:
            report = Report.model_validate_json(handle.read())
        audited = report.target.model_file
        if audited and os.path.abspath(audited) != entry:
            raise ValueError(f"the report {options.from_report} is an audit of {audited}, not of {entry}")
    else:
        progress(f"auditing {entry}")
        report = workload.audit(entry, options.out_dir)
    root = os.path.abspath(options.root or os.getcwd())
    if os.path.relpath(entry, root).startswith(".."):
        root = os.path.dirname(entry)
    plan = plan_patch(report.findings, rules.ruleset, entry=entry, root=root, unsafe=options.unsafe)
    by_id = {f.id: f for f in report.findings}
    whole = None
    if plan.patched and options.verify:
        whole = _reaudit(plan, [by_id[i] for i in plan.patched], workload, report.target.device, options, rules,
                         progress)
    for finding in report.findings:
        finding.edit = plan.edits.get(finding.id)
    # the report's "all fixes together" is the whole patch's measurement here
    report.verification = report.verification.model_copy(update={"combined": whole, "enabled": options.verify})
    return FixResult(report=report, plan=plan, patch=plan.diff(plan.patched))


def _reaudit(plan: PatchPlan, findings: list[Finding], workload, device: str, options: FixOptions,
             rules: RuleConfig, progress: Callable[[str], None]) -> Verification | None:
    """Each edit measured alone; the patched copy audited again for the findings; then the held edits
    together (returned: the whole patch's measurement)."""
    files = FileSession.start(options.shadow_limit_mb)
    try:
        fixes = measure_fixes(
            findings, lambda chosen, seconds: _measure(plan, chosen, seconds, workload, device, rules, files),
            None if options.pairs else options.budget, lambda chosen: 5.0, device=options.device, progress=progress)
    finally:
        files.close()
    results = fixes.results
    for finding in findings:
        _hold_or_drop(plan.edits[finding.id], finding, results.get(finding.id))
    verified = {f.id for f in findings if results.get(f.id) and results[f.id].status == "verified"}
    if plan.patched:
        with patched_copy(plan, plan.patched, workload.entry) as patched:
            progress("auditing the patched source")
            again = workload.audit(patched, os.path.join(os.path.dirname(patched), "reports"))
        remaining = {f.slug: f for f in again.findings}
        for finding in findings:
            edit = plan.edits[finding.id]
            if edit.status != "patched":
                continue
            edit.cleared = finding.slug not in remaining
            if not edit.cleared and finding.id not in verified:  # neither the cause gone nor a gain shown
                edit.status, edit.reason = "dropped", (f"the re-audit of the patched source still finds it "
                                                       f"({remaining[finding.slug].message}), and no gain was verified")
    held = plan.patched
    whole = plan.edits[held[0]].verification if len(held) == 1 else None
    if fixes.combined is not None and verified == set(held):
        whole = fixes.combined
    elif len(held) > 1:  # the patch as handed over: every held edit, verified or not
        files = FileSession.start(options.shadow_limit_mb)
        try:
            whole = _measure(plan, [f for f in findings if f.id in held], options.budget / (len(findings) + 1),
                             workload, device, rules, files)
        finally:
            files.close()
    return whole


def _hold_or_drop(edit: SourceEdit, finding: Finding, measured: Verification | None) -> None:
    """The edit keeps its place in the patch or is dropped, with the reason, by what its patched source measured."""
    edit.verification = measured
    if measured is None:
        return
    if busy := contended_loss(measured):  # as the audit does not demote such a fix, the patch keeps it
        edit.reason = (f"the patched source measured {measured.status} {_speedup(measured)} under contention "
                       f"({'; '.join(busy)}): kept, as the machine, not the edit, may have decided it")
    elif measured.status not in HELD:
        edit.status, edit.reason = "dropped", _why_dropped(measured)
    elif (finding.verification is not None and finding.verification.status == "verified"
          and measured.status == "no-gain"):
        edit.status, edit.reason = "dropped", (  # --from an audit that measured the fix: the edit must hold it
            f"the audit measured the fix {_speedup(finding.verification)}; the patched source "
            f"{_speedup(measured)}, no gain")


def _measure(plan: PatchPlan, chosen: list[Finding], seconds: float, workload, device: str, rules: RuleConfig,
             files: FileSession) -> Verification:
    specs = [rules.ruleset.get(f.slug) for f in chosen]
    for finding, rule in zip(chosen, specs):
        reason = rule.fix_spec.unmeasurable(finding, device) if rule.fix_spec is not None else None
        if reason is not None and len(chosen) == 1 and not rule.patch_measured:
            return Verification(status="not-verifiable-here", note=reason)  # as its audit said; cleared is checked
    tolerance = max(patch_tolerance(rule, finding) for finding, rule in zip(chosen, specs))
    label = chosen[0].slug if len(chosen) == 1 else "the whole patch"
    with patched_copy(plan, [f.id for f in chosen], workload.entry) as patched:
        return workload.measure(patched, label, seconds, tolerance, any(r.patch_spec.through_loader for r in specs),
                                chosen, files)


def _why_dropped(verification: Verification) -> str:
    if verification.status == "numerics-failed":
        return f"the patched source changes the results: {verification.note}"
    if verification.status == "fix-failed":
        return f"the patched source did not run: {verification.note}"
    return f"the patched source measured {verification.status} {_speedup(verification)}".strip()


def _speedup(verification: Verification) -> str:
    if verification.speedup is None:
        return ""
    return f"{verification.speedup:.2f}x [{verification.ci_low:.2f}-{verification.ci_high:.2f}], n={verification.samples}"
