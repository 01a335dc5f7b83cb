"""``advisor audit MODEL_FILE``: capture in the supervised child -> evidence -> the shared assembly."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

from advisor.assembly.build import assemble_report, failed
from advisor.assembly.verification import verify_findings
from advisor.capture.collect import TraceReadAhead, gather_capture
from advisor.capture.stages import CAPTURE, UNTIMED_FROM
from advisor.commands.options import MeasureOptions
from advisor.evidence import (
    Evidence,
)
from advisor.files.session import FileSession
from advisor.report.schema import Report, VerificationSettings
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Finding, Verification
from advisor.run.window_spec import WindowSpec
from advisor.sandbox.specs import CaptureSpec, VerifySpec, fetch_deadline
from advisor.sandbox.supervisor import run_capture
from advisor.verify.orchestrate import measure_fixes
from advisor.verify.plan import MeasuredFixes
from advisor.verify.stage import VERIFY

VERIFY_MARGIN_S = 120  # compile time and start-up beyond the measuring budget
MIN_CHILD_BUDGET_S = 5.0  # below this a fresh child cannot start, load the model and measure


@dataclass(kw_only=True)
class AuditOptions(MeasureOptions):
    model_file: str
    mode: str = "auto"
    device: str = "auto"


@dataclass
class AuditResult:
    report: Report
    evidence: Evidence | None
    written: dict[str, str] = field(default_factory=dict)
    run_window: WindowSpec | None = None  # advisor run: the window its verification runs repeat

    @property
    def failed(self) -> bool:
        return failed(self.report)

    def exit_code(self, fail_on: str) -> int:
        return self.report.exit_code(fail_on, failed=self.failed)


def run_audit(options: AuditOptions, progress: Callable[[str], None] = lambda text: None,
              rules: RuleConfig | None = None) -> AuditResult:
    """Run one audit. Raises SettingError for bad --set/--disable before running anything."""
    rules = rules or RuleConfig.of(options)
    os.makedirs(options.out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(options.model_file))[0]
    trace_path = os.path.abspath(os.path.join(options.out_dir, f"{stem}.trace.json.gz"))
    if os.path.exists(trace_path):
        os.remove(trace_path)  # never report a stale trace from an earlier run
    spec = CaptureSpec(model_file=os.path.abspath(options.model_file), mode=options.mode, device=options.device,
                       trace_path=trace_path, fetch_deadline_s=fetch_deadline(options.timeout),
                       wait_for_quiet_s=options.wait_for_quiet_s)
    files = FileSession.start(options.shadow_limit_mb)
    try:
        # the capture runs the user's code as a run of theirs would: its writes are real (and journaled)
        environment, scratch = (files.shadow_environment() if options.experiment
                                else (files.journal_environment(), files.folder))
        read_ahead = TraceReadAhead(UNTIMED_FROM)
        run = run_capture(spec, options.timeout, CAPTURE, progress, environment=environment, scratch_in=scratch,
                          on_start=read_ahead.on_start)
        gathered = gather_capture(run, options.model_file, read_ahead)
        evidence, errors = gathered.evidence, gathered.errors
        report = assemble_report(gathered, rules, VerificationSettings(enabled=options.verify, budget_s=options.budget,
                                                                       pairs=options.pairs))
        files.remember()
        refusal = files.refusal()
        verify_findings(report, rules, errors,
                        lambda findings: refusal or _measure_in_child(findings, spec, options, progress, files, rules),
                        patches=True)
        report.files = files.record("the capture ran its stages to their end")
    finally:
        files.close()
    return AuditResult(report=report, evidence=evidence)


def _measure_in_child(findings: list[Finding], spec: CaptureSpec, options: AuditOptions, progress,
                      files: FileSession, rules: RuleConfig) -> MeasuredFixes:
    """Each fix in a fresh supervised child (the user's code runs there, never here), then the verified
    ones together in another. One process per fix, as the step itself was timed in a fresh one: a
    process's memory allocator adapts to what ran before (manual_attention's baseline step: 7 ms fresh,
    4.2 ms after another fix had been measured), so fixes measured one after another in one process
    would depend on their order. A fix that exists only as an edit of the source is measured as that edit: a
    patched copy of the model's folder against the original (not with the others: it changes the file, they
    the copy of the model)."""
    def measure_set(chosen: list[Finding], seconds: float) -> Verification:
        rule = rules.ruleset.get(chosen[0].slug)
        if len(chosen) == 1 and rule is not None and rule.patch_measured:
            return _patch_child(spec, chosen[0], rule, seconds, options, progress, files, rules)
        return _child(spec, chosen, seconds, options, progress, files)
    return measure_fixes(findings, measure_set, None if options.pairs else options.budget,
                         lambda chosen: MIN_CHILD_BUDGET_S, device=spec.device, progress=progress,
                         joins=lambda outcome: outcome.memory is None and not outcome.source_patch)


def _patch_child(spec: CaptureSpec, finding: Finding, rule, budget_s: float | None, options: AuditOptions, progress,
                 files: FileSession, rules: RuleConfig) -> Verification:
    """The finding's edit of the source written into a scratch copy of the model's folder, measured against the
    original in a verification child; where no edit can be made, the reason and the rule's advice."""
    from advisor.patch.patch_plan import plan_patch
    from advisor.verify.patched_copy import measure_patched_model, patch_tolerance, patched_copy

    model_file = spec.model_file
    plan = plan_patch([finding], rules.ruleset, entry=model_file, root=os.path.dirname(model_file))
    edit = plan.edits.get(finding.id)
    if edit is None or edit.status != "patched":
        advice = rule.fix_spec.unmeasurable(finding, spec.device) if rule.fix_spec is not None else None
        why = edit.reason if edit is not None else "the rule made no edit"
        return Verification(status="not-verifiable-here", device=spec.device,
                            note="; ".join(part for part in (f"no edit of the source to measure ({why})", advice)
                                           if part))
    timeout = options.timeout if options.pairs else max(options.timeout, budget_s + VERIFY_MARGIN_S)
    patch_spec = _verify_spec(spec, budget_s, options, tolerance=patch_tolerance(rule, finding),
                              through_loader=rule.patch_spec.through_loader)
    with patched_copy(plan, [finding.id], model_file) as patched:
        return measure_patched_model(patch_spec, patched, finding.slug, timeout, files, progress)


def _child(spec: CaptureSpec, findings: list[Finding], budget_s: float | None, options: AuditOptions, progress,
           files: FileSession) -> Verification:
    """One verification child, measuring ``findings``' fixes as one candidate: an experiment, so its
    writes go to a shadow of the user's files."""
    verify_spec = _verify_spec(spec, budget_s, options, verify=list(findings), rule_dirs=list(options.rule_dirs))
    timeout = options.timeout if options.pairs else max(options.timeout, budget_s + VERIFY_MARGIN_S)
    environment, arm = files.shadow_environment()
    began = time.monotonic()
    try:
        outcome = run_capture(verify_spec, timeout, VERIFY, lambda text: progress(f"fixes: {text}"),
                              environment=environment, scratch_in=arm)
        full = files.full(arm)
    finally:
        label = "fix of " + findings[0].slug if len(findings) == 1 else "all verified fixes"
        files.finish_run(arm, label, time.monotonic() - began, None, "")
    if full is not None:
        return Verification(status="not-verifiable-here", note=full)
    text = outcome.result("verify")
    if text is None:
        failure = next(iter(outcome.errors), None)
        return Verification(status="fix-failed",
                            note=f"verification did not finish: {failure.message if failure else 'unknown'}")
    return Verification.model_validate_json(text)


def _verify_spec(capture: CaptureSpec, budget_s: float | None, options: AuditOptions, **fields) -> VerifySpec:
    """A verification child's spec: the model loaded as the capture loaded it."""
    return VerifySpec(model_file=capture.model_file, mode=capture.mode, device=capture.device,
                      fetch_deadline_s=capture.fetch_deadline_s, budget_s=budget_s, pairs=options.pairs, **fields)
