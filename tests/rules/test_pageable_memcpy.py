"""pageable-memcpy (ADV107): Host-device copies to or from pageable (unpinned) memory. Its cases: the bundled
samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_analyze import ALEXNET_TRACE, BUSY_TRACE, _findings

from advisor.trace.parse import parse_trace
from conftest import shared_trace
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("pageable-memcpy")


def test_sampled_transformer_trace_pageable_copies_both_ways():
    found = _findings("timeline_analysis/sampled_rank-0.json.gz")
    pageable = found["pageable-memcpy"]
    assert pageable.evidence["copies_per_step"] == 12  # 16 HtoD + 8 DtoH pageable over 2 steps
    assert pageable.evidence["directions"] == ["device to host", "host to device"]


def test_amd_trace_gets_no_cuda_specific_findings_and_triton_kernel_is_linked():
    found = _findings("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert "pageable-memcpy" not in found  # "Host -> Device" copies of ROCm are not CUDA pageable copies
    assert all("cuda" not in loc.label().lower() for f in found.values() for loc in f.locations)
    triton = parse_trace(str(shared_trace("triton_example/triton_example.json.gz")))
    [kernel] = triton.kernels
    assert kernel.step == 0  # linked to its cuLaunchKernel inside ProfilerStep#0 by correlation


def test_alexnets_copies_from_pageable_memory_are_counted_per_step():
    found = _findings(ALEXNET_TRACE)
    assert found["pageable-memcpy"].evidence["copies_per_step"] == 16
    assert found["pageable-memcpy"].evidence["directions"] == ["host to device"]


def test_a_trace_whose_copies_are_pinned_or_absent_is_silent():
    assert "pageable-memcpy" not in _findings(BUSY_TRACE)
