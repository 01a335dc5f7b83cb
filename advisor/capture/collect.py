"""The capture's stage results, read back in the parent and turned into Evidence (the child wrote them as
JSON: ``capture/stages.py``)."""

from __future__ import annotations

import json
import os

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
from advisor.report.gathered import Gathered
from advisor.report.schema import ModelOutput, StageRecord
from advisor.sandbox.supervisor import CaptureRun
from advisor.trace.parse import TraceFormatError, parse_trace


def stage_records(run: CaptureRun) -> list[StageRecord]:
    return [StageRecord(stage=o.stage, status=o.status, seconds=round(o.seconds, 3), note=o.note)
            for o in run.outcomes.values()]


def gather_capture(run: CaptureRun, model_file: str) -> Gathered:
    """What the capture's stages recorded, in the shape every entry point hands to the assembly."""
    evidence, errors = build_evidence(run, model_file)
    return Gathered(evidence=evidence, errors=errors, stages=stage_records(run),
                    output=ModelOutput(stdout=run.stdout, stderr=run.stderr), judge=run.outcomes["load"].status == "ok")


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
