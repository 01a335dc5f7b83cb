"""cpu-threads (ADV127): More compute threads than CPU cores: oversubscription. Its cases: the bundled samples'
saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import fired

from advisor.evidence import DataLoaderInfo
from advisor.rulekit.rule import Severity
from conftest import (
    check_rule,
    only_finding,
    slugs,
    verify_sample,
)
from devkit.saved_evidence import as_cuda, as_device, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("cpu-threads")


@pytest.mark.slow
def test_oversubscribed_threads_and_the_measured_fix(sample_audit):
    finding = only_finding(sample_audit("oversubscribed_threads"), "cpu-threads")
    cores = finding.evidence["cores_available"]
    assert finding.evidence["torch_threads"] == 4 * cores and finding.severity == Severity.HIGH
    verdict = verify_sample("oversubscribed_threads", finding, "cpu-threads")
    assert verdict.status != "numerics-failed" and verdict.samples > 0
    for sample in ("clean_mlp", "dataloader_workers", "train_with_loader"):
        assert "cpu-threads" not in slugs(sample_audit(sample))


@pytest.mark.slow
def test_omp_setting_and_threads_plus_workers_on_a_recorded_environment(sample_audit):
    evidence = sample_audit("dataloader_workers").evidence  # a CPU training run with a loader
    eight = dict(cpu_cores_available=8, cpu_cores_logical=8, torch_threads=8)
    omp = as_device(evidence, "cpu", omp_num_threads="32", **eight)
    [finding] = check_rule("cpu-threads", omp)
    assert "OMP_NUM_THREADS=32" in finding.message and finding.severity == Severity.MEDIUM
    loader = evidence.data.model_copy(update={"num_workers": 6})
    crowded = as_device(evidence, "cpu", **eight).model_copy(update={"data": loader})
    [finding] = check_rule("cpu-threads", crowded)  # 8 + 6 > 1.5 x 8
    assert "6 loader workers" in finding.message
    assert check_rule("cpu-threads", crowded.model_copy(update={"data": evidence.data.model_copy(
        update={"num_workers": 3})})) == []  # 8 + 3 within 1.5 x 8
    on_gpu = as_cuda(evidence, **eight).model_copy(update={"data": loader})
    assert check_rule("cpu-threads", on_gpu) == []  # the step's work is on the GPU: workers may take the cores


def test_cpu_threads_from_omp_and_threads_plus_workers():
    evidence = saved_evidence("clean_mlp")
    assert "cpu-threads" not in fired(evidence)
    eight = {"cpu_cores_available": 8, "torch_threads": 8}
    assert "cpu-threads" in fired(as_device(evidence, "cpu", omp_num_threads="32", **eight))
    loader = DataLoaderInfo(num_workers=8, batch_size=8, batch_ms_median=1.0)
    crowded = as_device(evidence, "cpu", **eight).model_copy(update={"data": loader})
    assert "cpu-threads" in fired(crowded)
