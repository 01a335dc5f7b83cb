"""empty-cache (ADV130): torch.cuda.empty_cache() called inside the step. Its cases: the bundled samples' saved
evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import only

from advisor.rulekit.rule import Severity
from conftest import (
    check_rule,
    only_finding,
    verify_sample,
)
from devkit.saved_evidence import as_cuda, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("empty-cache")


@pytest.mark.slow
def test_empty_cache_in_the_step_is_low_on_cpu_and_high_on_cuda(sample_audit):
    result = sample_audit("empty_cache_step")
    finding = only_finding(result, "empty-cache")
    assert finding.severity == Severity.LOW and finding.evidence["calls_per_step"] == 3
    assert finding.locations[0].count_per_step == 3
    [on_gpu] = check_rule("empty-cache", as_cuda(result.evidence))
    assert on_gpu.severity == Severity.HIGH
    verdict = verify_sample("empty_cache_step", finding, "empty-cache")
    assert verdict.status == "not-verifiable-here" and "does nothing without CUDA" in verdict.note and "used cpu" in verdict.note


def test_empty_cache_is_low_on_cpu_and_high_on_cuda():
    evidence = saved_evidence("empty_cache_step")
    assert only(evidence, "empty-cache").severity == Severity.LOW
    assert only(as_cuda(evidence), "empty-cache").severity == Severity.HIGH
