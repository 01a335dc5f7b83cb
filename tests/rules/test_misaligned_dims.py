"""misaligned-dims (ADV121): fp16/bf16 matrix multiplies with dimensions that are not multiples of 8, on a GPU. Its
cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import fired, only

from conftest import check_rule, slugs
from devkit.saved_evidence import as_cuda, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("misaligned-dims")


@pytest.mark.slow
def test_misaligned_half_precision_matmuls_on_cudaonly_finding(sample_audit):
    result = sample_audit("misaligned_head")
    assert "misaligned-dims" not in slugs(result)  # CPU: not applicable
    [finding] = check_rule("misaligned-dims", as_cuda(result.evidence))
    assert sorted(map(tuple, finding.evidence["shapes"])) == [(250, 1001), (256, 250)]
    trace_only = as_cuda(result.evidence).model_copy(update={"graph": None})  # the trace's aten::addmm shapes
    [from_trace] = check_rule("misaligned-dims", trace_only)
    assert sorted(map(tuple, from_trace.evidence["shapes"])) == [(250, 1001), (256, 250)]
    aligned = sample_audit("bf16_weights")  # bf16, aligned dimensions
    assert check_rule("misaligned-dims", as_cuda(aligned.evidence)) == []


def test_misaligned_dims_only_on_cuda_and_only_for_reduced_precision():
    evidence = saved_evidence("misaligned_head")
    assert "misaligned-dims" not in fired(evidence)
    finding = only(as_cuda(evidence), "misaligned-dims")
    assert finding.evidence["shapes"] and finding.evidence["multiple"] == 8
    assert {n.dtype for n in evidence.graph.calls()} & {"float16", "bfloat16"}  # the sample's half matmuls


def test_misaligned_dims_counts_matmuls_that_autocast_would_run_in_half():
    evidence = saved_evidence("misaligned_head")
    graph_dtypes = {n.dtype for n in evidence.graph.calls()}
    autocast = evidence.target.model_copy(update={"autocast": "float16", "device": "cuda:0"})
    found = fired(as_cuda(evidence).model_copy(update={"target": autocast}))
    assert "misaligned-dims" in found, graph_dtypes
