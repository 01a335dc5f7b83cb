"""dataparallel (ADV132): nn.DataParallel instead of DistributedDataParallel. Its cases: the bundled samples' saved
evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import only

from advisor.rulekit.rule import Severity
from conftest import (
    check_rule,
    only_finding,
)
from devkit.saved_evidence import as_cuda, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("dataparallel")


@pytest.mark.slow
def test_data_parallel_wrapper(sample_audit):
    result = sample_audit("data_parallel")
    finding = only_finding(result, "dataparallel")
    assert finding.severity == Severity.LOW and finding.evidence["data_parallel_wrappers"] == 1
    [multi_gpu] = check_rule("dataparallel", as_cuda(result.evidence, gpu_count=4))
    assert multi_gpu.severity == Severity.HIGH


def test_data_parallel_on_one_and_on_several_gpus():
    evidence = saved_evidence("data_parallel")
    assert only(evidence, "dataparallel").severity == Severity.LOW
    assert only(as_cuda(evidence, gpu_count=4), "dataparallel").severity.rank > Severity.LOW.rank
