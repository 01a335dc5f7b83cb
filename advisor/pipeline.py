"""One audit, end to end: capture (in the supervised child) -> evidence -> rules -> report."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable

from advisor import __version__
from advisor.capture.supervisor import CaptureRun, run_capture
from advisor.capture.worker import VERIFY_STAGES
from advisor.engine import RuleSet, check_disabled, load_rules, parse_settings, run_rules
from advisor.errors import StageError
from advisor.evidence import (CallSite, DataLoaderInfo, Environment, Evidence, FlopCount, GraphCapture, RoutingGroup,
                              TargetInfo, Timing)
from advisor.kineto import TraceFormatError, parse_trace
from advisor.report.model import ModelOutput, Report, RuleProblemRecord, StageRecord, VerificationSettings
from advisor.report.summarize import summarize_graph, summarize_performance, summarize_trace
from advisor.rule import Verification

# Failures of these kinds leave the audit incomplete (exit 2); "unsupported" ones are noted only.
FAILING_KINDS = ("user-code", "timeout", "crash", "internal")
VERIFY_MARGIN_S = 120  # compile time and start-up beyond the measuring budget


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


@dataclass
class AuditResult:
    report: Report
    evidence: Evidence | None
    written: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(e.kind in FAILING_KINDS for e in self.report.errors)

    def exit_code(self, fail_on: str) -> int:
        return self.report.exit_code(fail_on, failed=self.failed)


def run_audit(options: AuditOptions, progress: Callable[[str], None] = lambda text: None,
              ruleset: RuleSet | None = None) -> AuditResult:
    """Run one audit. Raises SettingError for bad --set/--disable before running anything."""
    ruleset = ruleset or load_rules(options.rule_dirs)
    overrides = parse_settings(ruleset, options.settings)
    disabled = check_disabled(ruleset, options.disabled)
    os.makedirs(options.out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(options.model_file))[0]
    trace_path = os.path.abspath(os.path.join(options.out_dir, f"{stem}.trace.json.gz"))
    if os.path.exists(trace_path):
        os.remove(trace_path)  # never report a stale trace from an earlier run
    spec = {
        "model_file": os.path.abspath(options.model_file), "mode": options.mode, "device": options.device,
        "trace_path": trace_path,
    }
    run = run_capture(spec, options.timeout, progress)
    evidence, errors = build_evidence(run, options.model_file)
    report = Report(
        advisor_version=__version__,
        target=evidence.target,
        errors=errors,
        stages=[StageRecord(stage=o.stage, status=o.status, seconds=round(o.seconds, 3), note=o.note)
                for o in run.outcomes.values()],
        output=ModelOutput(stdout=run.stdout, stderr=run.stderr),
        verification=VerificationSettings(enabled=options.verify, budget_s=options.budget),
        rule_problems=[RuleProblemRecord(source=p.source, message=p.message) for p in ruleset.problems],
    )
    if run.outcomes["load"].status == "ok":
        findings, problems = run_rules(ruleset, evidence, overrides, disabled)
        report.findings = findings
        report.rule_problems += [RuleProblemRecord(source=p.source, message=p.message) for p in problems]
    if options.verify and report.findings:
        _verify(report, run, spec, options, progress)
    report.environment, report.timing, report.data = evidence.env, evidence.timing, evidence.data
    report.flops = evidence.flops
    report.performance = summarize_performance(evidence)
    if evidence.trace is not None:
        report.trace = summarize_trace(evidence.trace)
    if evidence.graph is not None:
        report.graph = summarize_graph(evidence.graph)
    return AuditResult(report=report, evidence=evidence)


def _verify(report: Report, run: CaptureRun, spec: dict, options: AuditOptions, progress) -> None:
    """Measure each finding's fix in a second supervised child (never after a hang or crash)."""
    unsafe = [e for e in run.errors if e.kind in ("timeout", "crash") or e.stage in ("timing", "trace")]
    if unsafe:
        report.verification.note = f"not attempted: the {unsafe[0].stage} stage {unsafe[0].kind}"
        return
    order = sorted(range(len(report.findings)), key=lambda i: -(report.findings[i].impact or 0.0))
    requests = [{"index": i, "finding": report.findings[i].model_dump(mode="json")} for i in order]
    verify_spec = {**spec, "verify": requests, "budget_s": options.budget, "rule_dirs": list(options.rule_dirs)}
    timeout = max(options.timeout, options.budget + VERIFY_MARGIN_S)
    outcome = run_capture(verify_spec, timeout, lambda text: progress(f"fixes: {text}"), stages=VERIFY_STAGES)
    text = outcome.result("verify")
    if text is None:
        failure = next(iter(outcome.errors), None)
        report.verification.note = f"verification did not finish: {failure.message if failure else 'unknown'}"
        return
    measured = json.loads(text)
    for index, result in measured["results"].items():
        report.findings[int(index)].verification = Verification.model_validate(result)
    if measured["combined"] is not None:
        report.verification.combined = Verification.model_validate(measured["combined"])


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
        evidence.calls = [CallSite.model_validate(site) for site in json.loads(text)]
    if (text := run.result("routing")) is not None:
        evidence.routing = [RoutingGroup.model_validate(group) for group in json.loads(text)]
    if (text := run.result("data")) is not None:
        evidence.data = DataLoaderInfo.model_validate_json(text)
    if (text := run.result("trace")) is not None:
        path = json.loads(text)["trace_path"]
        try:
            evidence.trace = parse_trace(path)
        except TraceFormatError as broken:
            errors.append(StageError(stage="trace", kind="internal", message=str(broken)))
    return evidence, errors
