"""dataloader-pin-memory (ADV106): Batches are copied to the GPU from pageable (unpinned) host memory. Its cases:
the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import fired, only

from advisor.evidence import DataLoaderInfo, Evidence, TargetInfo
from advisor.rulekit.engine import load_rules, run_rules
from advisor.rulekit.rule import Severity
from advisor.trace.parse import parse_trace
from conftest import shared_trace
from devkit.saved_evidence import saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("dataloader-pin-memory")


def test_pin_memory_on_cuda_counts_pageable_copies_from_a_recorded_trace():
    trace = parse_trace(str(shared_trace("critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")))
    evidence = Evidence(
        target=TargetInfo(model_file="recorded", device="cuda", mode="train"), trace=trace,
        data=DataLoaderInfo(pin_memory=False, batch_size=64, batch_bytes=64 * 3 * 224 * 224 * 4, batch_ms_median=1.0),
    )
    [finding] = [f for f in run_rules(load_rules(), evidence)[0] if f.slug == "dataloader-pin-memory"]
    assert finding.severity == Severity.MEDIUM and finding.evidence["count"] == 16
    pinned = evidence.model_copy(update={"data": evidence.data.model_copy(update={"pin_memory": True})})
    assert not [f for f in run_rules(load_rules(), pinned)[0] if f.slug == "dataloader-pin-memory"]


def test_pin_memory_is_info_on_cpu_and_counts_on_cuda():
    evidence = saved_evidence("dataloader_workers")
    assert only(evidence, "dataloader-pin-memory").severity == Severity.INFO
    pinned = evidence.model_copy(update={"data": evidence.data.model_copy(update={"pin_memory": True})})
    assert "dataloader-pin-memory" not in fired(pinned)


@pytest.mark.slow
def test_small_batches_on_cpu_get_no_pin_memory_advice(sample_audit):
    assert sample_audit("train_with_loader").evidence.data.batch_bytes < 2**20
    assert not [f for f in sample_audit("train_with_loader").report.findings if f.slug.startswith("dataloader")]
