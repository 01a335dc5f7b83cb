"""The capture's stage results, read back in the parent and turned into Evidence (the child wrote them as
JSON: ``capture/stages.py``)."""

from __future__ import annotations

import json
import os
import threading

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
from advisor.evidence.memory_records import StepMemory
from advisor.gathered import Gathered, ModelOutput, StageRecord
from advisor.machine.peaks import MachinePeaks
from advisor.records import build_validator
from advisor.sandbox.supervisor import CaptureRun
from advisor.trace.model import Trace
from advisor.trace.parse import TraceFormatError, parse_trace

STAGE_RECORDS = (TargetInfo, Environment, Timing, GraphCapture, FlopCount, CallSite, RoutingGroup, DataLoaderInfo)


class TraceReadAhead:
    """Parses the profiler's trace in the parent, on the other core, while the child runs stages that time
    nothing (``from_stage`` on: the graph capture, routing); then builds the validators the stage results are
    read with and imports the graph rules' networkx. On kernel_storm the parent's work after the child fell
    from about 0.85 s to 0.2 s. Pass ``on_start`` to ``run_capture``; ``build_evidence`` takes the parsed
    trace from it (or parses then, if reading never started)."""

    def __init__(self, from_stage: str):
        self._from_stage = from_stage
        self._thread: threading.Thread | None = None
        self._path = ""
        self._parsed: Trace | None = None
        self._failure: BaseException | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def on_start(self, stage: str, run: CaptureRun) -> None:
        if stage != self._from_stage or self._thread is not None or (text := run.result("trace")) is None:
            return
        self._path = json.loads(text)["trace_path"]
        self._thread = threading.Thread(target=self._read, name="advisor-trace-read-ahead", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            self._parsed = parse_trace(self._path)
        except BaseException as failure:  # noqa: BLE001 - raised again in the main thread
            self._failure = failure
        for record in STAGE_RECORDS:
            build_validator(record)
        import networkx  # noqa: F401 - the graph rules' (Evidence.digraph), imported here while the time is free

    def trace(self, path: str) -> Trace:
        if self._thread is None or path != self._path:
            return parse_trace(path)
        self._thread.join()
        if self._failure is not None:
            raise self._failure
        return self._parsed


def stage_records(run: CaptureRun) -> list[StageRecord]:
    return [StageRecord(stage=o.stage, status=o.status, seconds=round(o.seconds, 3), note=o.note)
            for o in run.outcomes.values()]


def gather_capture(run: CaptureRun, model_file: str, read_ahead: TraceReadAhead | None = None) -> Gathered:
    """What the capture's stages recorded, in the shape every entry point hands to the assembly."""
    evidence, errors = build_evidence(run, model_file, read_ahead)
    return Gathered(evidence=evidence, errors=errors, stages=stage_records(run),
                    output=ModelOutput(stdout=run.stdout, stderr=run.stderr), judge=run.outcomes["load"].status == "ok")


def build_evidence(run: CaptureRun, model_file: str,
                   read_ahead: TraceReadAhead | None = None) -> tuple[Evidence, list[StageError]]:
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
    if (text := run.result("peaks")) is not None:
        evidence.peaks = MachinePeaks.model_validate_json(text)
    if (text := run.result("memory")) is not None:
        evidence.memory = StepMemory.model_validate_json(text)
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
            evidence.trace = read_ahead.trace(path) if read_ahead is not None else parse_trace(path)
            evidence.flops = FlopCount.of_trace(evidence.trace)  # the step's work as the profiler recorded it
        except TraceFormatError as broken:  # the audit goes on without the trace-based rules
            errors.append(StageError(stage="trace", kind="unsupported",
                                     message=f"torch.profiler wrote a trace advisor cannot read ({broken}); "
                                             "the rules that read the trace did not run"))
    return evidence, errors
