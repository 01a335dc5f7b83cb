"""``advisor ready MODEL_FILE``: the readiness stages in the supervised child -> evidence -> checks ->
the shared report assembly (with no rules run: readiness is a gate, not an audit)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from advisor.assembly.build import assemble_report
from advisor.capture.collect import gather_capture
from advisor.commands.audit import AuditResult
from advisor.commands.options import ReportOptions
from advisor.ready.checks import ReadyOptions, decide
from advisor.ready.gathered_ready import ready_evidence
from advisor.ready.probes import READY
from advisor.report.schema import VerificationSettings
from advisor.rulekit.engine import RuleConfig
from advisor.sandbox.specs import ReadySpec, fetch_deadline
from advisor.sandbox.supervisor import run_capture

DEFAULT_BATCH_SIZES = (1, 8, 32)


@dataclass(kw_only=True)
class ReadyRunOptions(ReportOptions):
    model_file: str
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    device: str = "auto"
    timeout: float = 300.0
    fail_on: str = "fail"
    seconds_per_size: float = 2.0
    checks: ReadyOptions = field(default_factory=ReadyOptions)


def run_ready(options: ReadyRunOptions, progress: Callable[[str], None] = lambda text: None) -> AuditResult:
    os.makedirs(options.out_dir, exist_ok=True)
    spec = ReadySpec(model_file=os.path.abspath(options.model_file), mode="inference", device=options.device,
                     batch_sizes=list(options.batch_sizes), precision=options.checks.precision,
                     seconds_per_size=options.seconds_per_size, fetch_deadline_s=fetch_deadline(options.timeout))
    run = run_capture(spec, options.timeout, READY, progress)
    gathered = gather_capture(run, options.model_file)
    gathered.judge = False  # a gate, not an audit: the checks decide, no rule runs
    report = assemble_report(gathered, RuleConfig.load(), VerificationSettings(enabled=False))
    if run.outcomes["load"].status == "ok":
        report.readiness = decide(ready_evidence(run, list(options.batch_sizes)), options.checks)
    return AuditResult(report=report, evidence=gathered.evidence)
