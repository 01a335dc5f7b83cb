"""What ``advisor ready``'s stages in the supervised child measured, read back into the one record the checks
read (``measured.ReadyEvidence``); a stage that did not run is named with why."""

from __future__ import annotations

import json

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
from advisor.report.readiness import LatencyRow
from advisor.sandbox.supervisor import CaptureRun


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
