"""advisor analyze: recorded GPU traces (../shared) through the parser and the trace rules."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from advisor.capture.recorded import evidence_from_traces
from advisor.commands.analyze import AnalyzeOptions, run_analyze
from advisor.rulekit.engine import load_rules, run_rules
from advisor.trace.parse import TraceFormatError, parse_trace
from conftest import shared_trace

CUDA_SLUGS = {"pageable-memcpy", "sync-memcpy", "host-sync"}
# the positives of the rules that read GPU traces only: real traces recorded elsewhere (../shared/traces/hta)
ALEXNET_TRACE = "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
BUSY_TRACE = "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
SHARED_TRACE_POSITIVES = {
    ALEXNET_TRACE: {"pageable-memcpy", "sync-memcpy"},
    "nccl_parser_config/nccl_data.json.gz": {"gpu-idle"},
    "with_gpu_user_annotation/step_based_trace_2543932.json.gz": {"fusion-candidates"},
}


@pytest.mark.parametrize("trace", sorted(SHARED_TRACE_POSITIVES))
def test_the_shared_gpu_traces_fire_their_rules(trace):
    assert SHARED_TRACE_POSITIVES[trace] <= set(_findings(trace))


def _findings(relative: str) -> dict:
    evidence = evidence_from_traces(parse_trace(str(shared_trace(relative))))
    findings, problems = run_rules(load_rules(), evidence)
    assert problems == []
    return {f.slug: f for f in findings}


def test_a_busy_gpu_is_not_idle_nor_a_storm():
    found = _findings(BUSY_TRACE)
    assert "gpu-idle" not in found and "kernel-storm" not in found


@pytest.mark.slow
def test_cli_names_a_broken_trace_and_exits_2(tmp_path):
    broken = tmp_path / "cut.json.gz"
    broken.write_bytes(gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "ts": 1}] * 50}).encode())[:-30])
    completed = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(broken), "--out", str(tmp_path)],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and f"{broken}:" in completed.stderr and "Traceback" not in completed.stderr


@pytest.mark.parametrize("broken_rank", [0, 2])
def test_a_broken_rank_in_a_folder_is_named_whether_this_process_or_a_worker_parsed_it(tmp_path, broken_rank):
    source = shared_trace("critical_path/cuda_event_sync/event_sync_trace.json.gz").read_bytes()
    for rank in range(4):
        (tmp_path / f"rank-{rank}.json.gz").write_bytes(source[:-30] if rank == broken_rank else source)
    result = run_analyze(AnalyzeOptions(paths=(str(tmp_path),), out_dir=str(tmp_path / "out")))
    [error] = result.report.errors
    assert f"rank-{broken_rank}.json.gz: the gzip stream is truncated" in error.message and result.evidence is None


def test_truncated_plain_json_is_named_truncated(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": "X", "na')
    with pytest.raises(TraceFormatError, match=r"t\.json: the file ends inside a value .* truncated"):
        parse_trace(str(path))


def test_streaming_reads_members_after_the_events_and_a_bare_array(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": i, "dur": 0.5, "tid": 1} for i in range(3000)]
    late = tmp_path / "late.json"
    late.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"name": "X"}],
                                "distributedInfo": {"rank": 3}}))
    trace = parse_trace(str(late))
    assert len(trace.ops) == 3000 and trace.distributed_info == {"rank": 3}
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(events[:10]))
    assert len(parse_trace(str(bare)).ops) == 10
