"""ddp-buckets (ADV136): DDP gradient buckets too small, or communication left exposed after backward. Its cases:
the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_ddp_rules import _evidence, _fired

from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("ddp-buckets")


def test_small_buckets_are_reported_with_a_cap_from_the_gradient_size():
    many = _evidence(bucket_cap_bytes=2**20, bucket_bytes=[1536 * 1024] * 4, synced_forwards_per_step=4.0)
    finding = _fired(many)["ddp-buckets"]
    assert finding.evidence["buckets"] == 4 and finding.evidence["suggested_bucket_cap_mb"] == 25
    assert "gradient_as_bucket_view=True" in finding.fix.summary
    # a small model's one bucket at the end of backward: no bucket size helps, so nothing is said
    assert "ddp-buckets" not in _fired(_evidence(bucket_bytes=[6 * 2**20], backward_overlap_ms=0.5))
    large = _evidence(parameter_bytes=400 * 2**20, bucket_bytes=[400 * 2**20], backward_overlap_ms=0.5)
    assert _fired(large)["ddp-buckets"].evidence["suggested_bucket_cap_mb"] == 100  # split so buckets overlap
