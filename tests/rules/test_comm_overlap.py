"""comm-overlap (ADV111): Collective communication (NCCL/RCCL on GPUs, gloo on CPUs) that is not overlapped with
compute. Its cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_analyze import _findings
from test_ddp_rules import _fired

from devkit.saved_evidence import DDP_DIR, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("comm-overlap")


def test_one_bucket_at_the_end_of_backward_is_not_reported_as_exposed():
    clean = saved_evidence("ddp_clean", DDP_DIR)
    assert clean.trace.host_collectives and _fired(clean) == {}
    # the same trace, had the gradients gone out in two buckets, is judged on its exposed communication
    split = clean.model_copy(update={"ddp": clean.ddp.model_copy(update={"bucket_bytes": [2**20, 5 * 2**20],
                                                                         "bucket_cap_bytes": 2**20})})
    assert "comm-overlap" in _fired(split)


def test_exposed_communication_on_real_ddp_traces():
    ddp = _findings("nccl_parser_config/nccl_data.json.gz")["comm-overlap"]
    assert 15 < ddp.evidence["comm_ms_per_step"] < 16.5  # 21 collectives over 3 steps
    assert ddp.evidence["overlapped_share"] < 0.25 and ddp.severity.value == "medium"
    assert "comm-overlap" not in _findings("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
