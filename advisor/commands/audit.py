"""``advisor audit MODEL_FILE``: capture in the supervised child -> evidence -> the shared assembly."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from advisor.capture.stages import CAPTURE
from advisor.errors import StageError
from advisor.evidence import (
    CallSite,
    DataLoaderInfo,
    Environment,
    Evidence,
    FlopCount,
    GraphCapture,
    RoutingGroup,
    TargetInfo,
    Timing,
)
from advisor.files.session import FileSession
from advisor.report.assembly import assemble_report, failed
from advisor.report.schema import ModelOutput, Report, StageRecord, VerificationSettings
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Finding, Verification
from advisor.sandbox.supervisor import CaptureRun, run_capture
from advisor.trace.parse import TraceFormatError, parse_trace
from advisor.verify.orchestrate import measure_fixes, verify_findings
from advisor.verify.plan import MeasuredFixes
from advisor.verify.stage import VERIFY

VERIFY_MARGIN_S = 120  # compile time and start-up beyond the measuring budget
MIN_CHILD_BUDGET_S = 5.0  # below this a fresh child cannot start, load the model and measure


@dataclass
class AuditOptions:
    model_file: str
    out_dir: str = "reports"
    formats: tuple[str, ...] = ("html", "json")
    mode: str = "auto"
    device: str = "auto"
    timeout: float = 300.0
    rule_dirs: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    fail_on: str = "high"
    verify: bool = True
    budget: float = 120.0
    pairs: int | None = None  # each fix measured with exactly this many pairs, whatever the time (no budget)
    shadow_limit_mb: float | None = None  # the capture's journal and each verification child's shadow


@dataclass
class AuditResult:
    report: Report
    evidence: Evidence | None
    written: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return failed(self.report)

    def exit_code(self, fail_on: str) -> int:
        return self.report.exit_code(fail_on, failed=self.failed)


def run_audit(options: AuditOptions, progress: Callable[[str], None] = lambda text: None,
              rules: RuleConfig | None = None) -> AuditResult:
    """Run one audit. Raises SettingError for bad --set/--disable before running anything."""
    rules = rules or RuleConfig.load(options.rule_dirs, options.settings, options.disabled)
    os.makedirs(options.out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(options.model_file))[0]
    trace_path = os.path.abspath(os.path.join(options.out_dir, f"{stem}.trace.json.gz"))
    if os.path.exists(trace_path):
        os.remove(trace_path)  # never report a stale trace from an earlier run
    spec = {
        "model_file": os.path.abspath(options.model_file), "mode": options.mode, "device": options.device,
        "trace_path": trace_path,
        "fetch_deadline_s": min(60.0, options.timeout / 2),  # a hung loader: the data stage times out on it
    }
    files = FileSession.start(options.shadow_limit_mb)
    try:
        # the capture runs the user's code as a run of theirs would: its writes are real (and journaled)
        run = run_capture(spec, options.timeout, CAPTURE, progress, environment=files.journal_environment(),
                          scratch_in=files.folder)
        evidence, errors = build_evidence(run, options.model_file)
        report = assemble_report(
            evidence, rules, errors=errors, stages=stage_records(run),
            output=ModelOutput(stdout=run.stdout, stderr=run.stderr),
            verification=VerificationSettings(enabled=options.verify, budget_s=options.budget, pairs=options.pairs),
            run_rules=run.outcomes["load"].status == "ok",
        )
        files.remember()
        refusal = files.refusal()
        verify_findings(report, rules, errors,
                        lambda findings: refusal or _measure_in_child(findings, spec, options, progress, files))
        report.files = files.record("the capture ran its stages to their end")
    finally:
        files.close()
    return AuditResult(report=report, evidence=evidence)


def _measure_in_child(findings: list[Finding], spec: dict, options: AuditOptions, progress,
                      files: FileSession) -> MeasuredFixes:
    """Each fix in a fresh supervised child (the user's code runs there, never here), then the verified
    ones together in another. One process per fix, as the step itself was timed in a fresh one: a
    process's memory allocator adapts to what ran before (manual_attention's baseline step: 7 ms fresh,
    4.2 ms after another fix had been measured), so fixes measured one after another in one process
    would depend on their order."""
    return measure_fixes(findings, lambda chosen, seconds: _child(spec, chosen, seconds, options, progress, files),
                         None if options.pairs else options.budget, lambda: MIN_CHILD_BUDGET_S,
                         device=spec.get("device", ""), progress=progress)


def _child(spec: dict, findings: list[Finding], budget_s: float, options: AuditOptions, progress,
           files: FileSession) -> Verification:
    """One verification child, measuring ``findings``' fixes as one candidate: an experiment, so its
    writes go to a shadow of the user's files."""
    verify_spec = {**spec, "verify": [f.model_dump(mode="json") for f in findings], "budget_s": budget_s,
                   "rule_dirs": list(options.rule_dirs), "pairs": options.pairs}
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


def stage_records(run: CaptureRun) -> list[StageRecord]:
    return [StageRecord(stage=o.stage, status=o.status, seconds=round(o.seconds, 3), note=o.note)
            for o in run.outcomes.values()]


def build_evidence(run: CaptureRun, model_file: str) -> tuple[Evidence, list[StageError]]:
    errors = list(run.errors)
    loaded = run.result("load")
    target = TargetInfo.model_validate_json(loaded) if loaded else TargetInfo(model_file=os.path.abspath(model_file))
    evidence = Evidence(target=target)
    if (text := run.result("env")) is not None:
        evidence.env = Environment.model_validate_json(text)
    if (text := run.result("timing")) is not None:
        evidence.timing = Timing.model_validate_json(text)
    if (text := run.result("graph")) is not None:
        evidence.graph = GraphCapture.model_validate_json(text)
    elif (outcome := run.outcomes.get("graph")) is not None and outcome.error is not None:
        evidence.graph_error = outcome.error.message
    if (text := run.result("flops")) is not None:
        evidence.flops = FlopCount.model_validate_json(text)
    if (text := run.result("calls")) is not None:
        watched = json.loads(text)
        evidence.calls = [CallSite.model_validate(site) for site in watched["sites"]]
        evidence.target.autocast = watched["autocast"]
    if (text := run.result("routing")) is not None:
        evidence.routing = [RoutingGroup.model_validate(group) for group in json.loads(text)]
    if (text := run.result("data")) is not None:
        evidence.data = DataLoaderInfo.model_validate_json(text)
    if (text := run.result("trace")) is not None:
        path = json.loads(text)["trace_path"]
        try:
            evidence.trace = parse_trace(path)
        except TraceFormatError as broken:  # the audit goes on without the trace-based rules
            errors.append(StageError(stage="trace", kind="unsupported",
                                     message=f"torch.profiler wrote a trace advisor cannot read ({broken}); "
                                             "the rules that read the trace did not run"))
    return evidence, errors
