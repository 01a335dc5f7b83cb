"""pcie-link-degraded (ADV141): The GPU's PCIe link runs narrower or at an older generation than the device
supports. Its cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_gpus import _on_gpu
from test_hardware_rules import _findings

from advisor.rulekit.rule import Severity
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("pcie-link-degraded")


def test_a_link_trained_at_half_its_width_is_named_with_the_bandwidth_left():
    evidence, _, _ = _on_gpu("throttled_narrow_shared")  # x8 of x16
    [narrow], _ = _findings(evidence, "pcie-link-degraded")
    assert narrow.severity == Severity.MEDIUM and "x8" in narrow.message and narrow.evidence["bandwidth_share"] == 0.5


def test_a_link_at_its_full_width_is_silent():
    evidence, _, _ = _on_gpu("healthy")
    found, run = _findings(evidence, "pcie-link-degraded")
    assert found == [] and run.status == "silent"
