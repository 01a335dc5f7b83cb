"""fusion-candidates (ADV110): Frequent sequences of short GPU kernels under one CPU op: candidates for fusion. Its
cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_analyze import _findings

from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("fusion-candidates")


def test_fusion_candidates_name_the_op_and_its_kernels():
    fusion = _findings("with_gpu_user_annotation/step_based_trace_2543932.json.gz")["fusion-candidates"]
    assert "aten::linear launching 2 kernels" in fusion.message and fusion.locations[0].function == "aten::linear"
