"""``advisor ready MODEL_FILE``: the readiness stages in the supervised child -> evidence -> checks ->
the shared report assembly (with no rules run: readiness is a gate, not an audit)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable

from advisor.capture.collect import gather_capture
from advisor.commands.audit import AuditResult
from advisor.commands.options import ReportOptions
from advisor.ready.checks import ReadyOptions, decide
from advisor.ready.measured import (
    ColdStartEvidence,
    CompileEvidence,
    DeterminismEvidence,
    ExportEvidence,
    MemoryBudget,
    ModesEvidence,
    PrecisionEvidence,
    ReadyEvidence,
    RecompileEvidence,
)
from advisor.ready.probes import READY
from advisor.report.assembly import assemble_report
from advisor.report.readiness import LatencyRow
from advisor.report.schema import VerificationSettings
from advisor.rulekit.engine import RuleConfig
from advisor.sandbox.supervisor import CaptureRun, run_capture

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
    spec = {"model_file": os.path.abspath(options.model_file), "mode": "inference", "device": options.device,
            "batch_sizes": list(options.batch_sizes), "precision": options.checks.precision,
            "seconds_per_size": options.seconds_per_size, "fetch_deadline_s": min(60.0, options.timeout / 2)}
    run = run_capture(spec, options.timeout, READY, progress)
    gathered = gather_capture(run, options.model_file)
    gathered.judge = False  # a gate, not an audit: the checks decide, no rule runs
    report = assemble_report(gathered, RuleConfig.load(), VerificationSettings(enabled=False))
    if run.outcomes["load"].status == "ok":
        report.readiness = decide(ready_evidence(run, list(options.batch_sizes)), options.checks)
    return AuditResult(report=report, evidence=gathered.evidence)


def ready_evidence(run: CaptureRun, batch_sizes: list[int]) -> ReadyEvidence:
    evidence = ReadyEvidence(batch_sizes=batch_sizes)
    parts = {"ready-cold": ("cold_start", ColdStartEvidence), "ready-modes": ("modes", ModesEvidence),
             "ready-export": ("export", ExportEvidence), "ready-compile": ("compile", CompileEvidence),
             "ready-recompiles": ("recompiles", RecompileEvidence),
             "ready-determinism": ("determinism", DeterminismEvidence),
             "ready-precision": ("precision", PrecisionEvidence)}
    for stage, (name, model) in parts.items():
        if (text := run.result(stage)) is not None:
            setattr(evidence, name, model.model_validate_json(text))
    if (text := run.result("ready-latency")) is not None:
        measured = json.loads(text)
        evidence.latency = [LatencyRow.model_validate(row) for row in measured["rows"]]
        evidence.memory = MemoryBudget.model_validate(measured["memory"])
    for stage, outcome in run.outcomes.items():
        if stage.startswith("ready-") and outcome.status != "ok":
            evidence.skipped[stage] = (outcome.error.message if outcome.error is not None else outcome.note) \
                or f"the {stage} stage did not run"
    return evidence
