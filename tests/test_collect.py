"""The parent's side of the capture: the trace read while the child's untimed stages run, and the export
those stages leave behind."""

from __future__ import annotations

import gzip
import json

import torch

from advisor.capture.collect import TraceReadAhead, build_evidence
from advisor.capture.profile import export_trace
from advisor.capture.stages import CAPTURE, UNTIMED_FROM
from advisor.sandbox.supervisor import CaptureRun, StageOutcome
from advisor.trace.parse import parse_trace
from conftest import ROOT

RECORDED = ROOT / "tests" / "data" / "evidence" / "kernel_storm.trace.json.gz"
TIMED_STAGES = ("timing", "trace", "data")


def _run_with_trace(path) -> CaptureRun:
    run = CaptureRun(outcomes={s: StageOutcome(s, "not-run") for s in CAPTURE.stages})
    run.outcomes["load"] = StageOutcome("load", "ok", result=None)
    run.outcomes["trace"] = StageOutcome("trace", "ok", result=json.dumps({"trace_path": str(path)}))
    return run


def test_every_stage_that_times_something_runs_before_the_parent_starts_reading():
    order = list(CAPTURE.stages)
    assert all(order.index(timed) < order.index(UNTIMED_FROM) for timed in TIMED_STAGES)


def test_the_trace_read_ahead_is_the_trace_parsed_afterwards():
    run = _run_with_trace(RECORDED)
    ahead = TraceReadAhead(UNTIMED_FROM)
    for stage in CAPTURE.stages[:CAPTURE.stages.index(UNTIMED_FROM)]:
        ahead.on_start(stage, run)
        assert not ahead.started, f"reading began during {stage}, which may time something"
    ahead.on_start(UNTIMED_FROM, run)
    assert ahead.started
    read = ahead.trace(str(RECORDED))
    afterwards = parse_trace(str(RECORDED))
    assert read == afterwards and len(read.ops) > 1000 and read.steps


def test_a_trace_the_read_ahead_cannot_parse_is_the_same_stage_error_as_without_it(tmp_path):
    broken = tmp_path / "broken.trace.json.gz"
    broken.write_bytes(gzip.compress(b'{"traceEvents": [{"name": "x", "ph": '))
    run = _run_with_trace(broken)
    ahead = TraceReadAhead(UNTIMED_FROM)
    ahead.on_start(UNTIMED_FROM, run)
    with_it, errors_with = build_evidence(run, "model.py", ahead)
    without, errors_without = build_evidence(run, "model.py")
    assert with_it.trace is None and without.trace is None
    assert [e.message for e in errors_with] == [e.message for e in errors_without]
    assert errors_with and "cannot read" in errors_with[0].message


def test_a_trace_that_never_started_reading_is_parsed_when_asked():
    ahead = TraceReadAhead(UNTIMED_FROM)  # the child died before the graph stage
    assert ahead.trace(str(RECORDED)) == parse_trace(str(RECORDED))


def test_the_export_is_one_gzip_of_the_profilers_json_and_leaves_nothing_beside_it(tmp_path):
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("ProfilerStep#0"):
            torch.ones(8, 8).matmul(torch.ones(8, 8))
    path = tmp_path / "t.trace.json.gz"
    export_trace(prof, str(path))
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    assert any(e.get("name") == "aten::mm" for e in events)
    assert len(parse_trace(str(path)).steps) == 1


def test_the_recorded_events_go_as_soon_as_the_trace_is_written_not_at_the_next_collection(tmp_path):
    # torch's profile object sits in a reference cycle: its events stayed (350 MB on a 32-layer GPT) until a full
    # collection, through the audit's later stages and the user's script
    import gc
    import weakref

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.ones(8, 8).matmul(torch.ones(8, 8))
    events = weakref.ref(prof.profiler)
    gc.disable()  # only reference counting frees from here
    try:
        export_trace(prof, str(tmp_path / "t.trace.json.gz"))
        del prof
        assert events() is None
    finally:
        gc.enable()
