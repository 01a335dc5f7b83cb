"""tf32-disabled (ADV124): fp32 matrix multiplies on an Ampere-or-newer GPU without TF32 tensor cores. Its cases:
the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_rules_on_evidence import fired

from advisor.capture.recorded import evidence_from_traces
from advisor.trace.parse import parse_trace
from conftest import (
    check_rule,
    shared_trace,
)
from devkit.saved_evidence import as_cuda, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("tf32-disabled")


ALEXNET = "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def _trace_findings(relative: str, slug: str) -> list:
    return check_rule(slug, evidence_from_traces(parse_trace(str(shared_trace(relative)))))


def test_tf32_off_shows_in_real_a100_traces():
    [alexnet] = _trace_findings(ALEXNET, "tf32-disabled")
    assert alexnet.evidence["fp32_gemm_kernels"] == 6  # ampere_sgemm_32x32_sliced1x4_tn for the linear layers
    assert alexnet.evidence["tensor_core_gemm_kernels"] == 6  # while cuDNN's convolutions run in TF32
    assert 0.2 < alexnet.evidence["fp32_gemm_share_of_gpu_time"] < 0.3
    [sync] = _trace_findings("critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz", "tf32-disabled")
    assert sync.evidence["fp32_gemm_kernels"] == 3
    assert _trace_findings("nccl_parser_config/nccl_data.json.gz", "tf32-disabled") == []  # s1688 tensor-op GEMMs
    assert _trace_findings("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "tf32-disabled") == []
    assert _trace_findings("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "tf32-disabled") == []


def test_tf32_is_not_advised_when_the_step_runs_under_autocast():
    evidence = saved_evidence("gpu_flags")
    assert "tf32-disabled" in fired(as_cuda(evidence))
    under_autocast = as_cuda(evidence).model_copy(update={
        "target": as_cuda(evidence).target.model_copy(update={"autocast": "bfloat16"})})
    assert "tf32-disabled" not in fired(under_autocast)
