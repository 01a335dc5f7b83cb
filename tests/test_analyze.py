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
from advisor.trace.ranks import RankTrace
from conftest import shared_trace

CUDA_SLUGS = {"pageable-memcpy", "sync-memcpy", "host-sync"}
# the positives of the rules that read GPU traces only: real traces recorded elsewhere (../shared/traces/hta)
SHARED_TRACE_POSITIVES = {
    "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": {"pageable-memcpy", "sync-memcpy"},
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


def test_alexnet_pageable_and_blocking_copies_are_counted():
    found = _findings("critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    assert found["pageable-memcpy"].evidence["copies_per_step"] == 16
    assert found["pageable-memcpy"].evidence["directions"] == ["host to device"]
    assert found["sync-memcpy"].evidence["blocking_copies_per_step"] == 16  # cudaMemcpyAsync + stream sync in aten::to
    assert found["sync-memcpy"].locations[0].function == "aten::to"
    assert "in the trace" in found["sync-memcpy"].message  # no ProfilerStep markers: no per-step claim


def test_sampled_transformer_trace_pageable_copies_both_ways():
    found = _findings("timeline_analysis/sampled_rank-0.json.gz")
    pageable = found["pageable-memcpy"]
    assert pageable.evidence["copies_per_step"] == 12  # 16 HtoD + 8 DtoH pageable over 2 steps
    assert pageable.evidence["directions"] == ["device to host", "host to device"]


def test_gpu_idle_split_on_a_real_ddp_trace():
    idle = _findings("nccl_parser_config/nccl_data.json.gz")["gpu-idle"]
    assert 0.7 < idle.evidence["idle_share"] < 0.8  # 222 ms steps, ~55 ms of GPU work
    assert idle.evidence["host_wait_share"] > 0.9 * idle.evidence["idle_share"]


def test_a_busy_gpu_is_not_idle_nor_a_storm():
    found = _findings("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    assert "gpu-idle" not in found and "kernel-storm" not in found


def test_amd_trace_gets_no_cuda_specific_findings_and_triton_kernel_is_linked():
    found = _findings("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert "pageable-memcpy" not in found  # "Host -> Device" copies of ROCm are not CUDA pageable copies
    assert all("cuda" not in loc.label().lower() for f in found.values() for loc in f.locations)
    triton = parse_trace(str(shared_trace("triton_example/triton_example.json.gz")))
    [kernel] = triton.kernels
    assert kernel.step == 0  # linked to its cuLaunchKernel inside ProfilerStep#0 by correlation


@pytest.mark.slow
def test_folder_of_ranks_and_the_cli(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    source = shared_trace("critical_path/cuda_event_sync/event_sync_trace.json.gz").read_bytes()
    for rank in (0, 1):
        (ranks / f"rank-{rank}.json.gz").write_bytes(source)
    result = run_analyze(AnalyzeOptions(paths=(str(ranks),), out_dir=str(tmp_path / "out")))
    assert len(result.evidence.ranks) == 2 and result.stem == "rank-0"
    completed = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(ranks), "--out", str(tmp_path / "out"),
                                "--fail-on", "high"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 1 and (tmp_path / "out" / "rank-0.html").exists()  # gpu-idle is high there
    assert "gpu-idle" in completed.stdout


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


def test_exposed_communication_on_real_ddp_traces():
    ddp = _findings("nccl_parser_config/nccl_data.json.gz")["comm-overlap"]
    assert 15 < ddp.evidence["comm_ms_per_step"] < 16.5  # 21 collectives over 3 steps
    assert ddp.evidence["overlapped_share"] < 0.25 and ddp.severity.value == "medium"
    assert "comm-overlap" not in _findings("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")


def test_fusion_candidates_name_the_op_and_its_kernels():
    fusion = _findings("with_gpu_user_annotation/step_based_trace_2543932.json.gz")["fusion-candidates"]
    assert "aten::linear launching 2 kernels" in fusion.message and fusion.locations[0].function == "aten::linear"


def test_kernel_storm_reports_launch_delays_on_a_launch_bound_trace():
    storm = _findings("with_gpu_user_annotation/step_based_trace_2543932.json.gz")["kernel-storm"]
    assert storm.evidence["launch_delay_us_p90"] >= storm.evidence["launch_delay_us_p50"] > 0
    assert 0 < storm.evidence["launch_slower_than_kernel_share"] <= 1


def _ranks_with_delay(tmp_path, delay_us: float):
    source = json.load(gzip.open(shared_trace("nccl_parser_config/nccl_data.json.gz")))
    collective = {e["args"]["correlation"] for e in source["traceEvents"]
                  if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()}
    folder = tmp_path / f"ranks-{int(delay_us)}"
    folder.mkdir()
    for rank in (0, 1):
        document = json.loads(json.dumps(source))
        document["distributedInfo"]["rank"] = rank
        if rank == 1:
            for event in document["traceEvents"]:
                if event.get("cat") == "cuda_runtime" and event.get("args", {}).get("correlation") in collective:
                    event["ts"] += delay_us
        (folder / f"rank-{rank}.json").write_text(json.dumps(document))
    return folder


def test_a_rank_launching_collectives_late_is_the_straggler(tmp_path):
    result = run_analyze(AnalyzeOptions(paths=(str(_ranks_with_delay(tmp_path, 5000)),), out_dir=str(tmp_path / "o")))
    [straggler] = [f for f in result.report.findings if f.slug == "straggler"]
    assert straggler.evidence["straggler"] == "rank 1" and 4.9 < straggler.evidence["late_ms"] < 5.1
    assert straggler.evidence["collectives_compared"] == 21
    even = run_analyze(AnalyzeOptions(paths=(str(_ranks_with_delay(tmp_path, 0)),), out_dir=str(tmp_path / "p")))
    assert not [f for f in even.report.findings if f.slug == "straggler"]


def test_a_folder_of_many_ranks_is_summarised_in_worker_processes_and_its_straggler_found(tmp_path):
    from devkit.synthetic_ranks import make_ranks

    base = shared_trace("nccl_parser_config/nccl_data.json.gz")
    make_ranks(str(tmp_path), 4, str(base))  # copies of one real trace; the last rank launches its collectives 20 ms late
    result = run_analyze(AnalyzeOptions(paths=(str(tmp_path),), out_dir=str(tmp_path / "out")))
    assert [rank.rank for rank in result.evidence.ranks] == [0, 1, 2, 3]
    assert all(isinstance(rank, RankTrace) for rank in result.evidence.ranks)  # only the primary is kept whole
    straggler = next(f for f in result.report.findings if f.slug == "straggler")
    assert straggler.evidence["straggler"] == "rank 3" and straggler.evidence["late_ms"] == 20.0
    # the pool's summaries are the summaries of the traces themselves
    assert result.evidence.ranks[2] == RankTrace.of(parse_trace(str(tmp_path / "rank002.json.gz")))
