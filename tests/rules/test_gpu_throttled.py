"""gpu-throttled (ADV140): The GPU's clocks were held down while the step was timed: power cap, heat or a clocks
setting. Its cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_gpus import _on_gpu
from test_hardware_rules import _findings

from advisor.rulekit.rule import Severity
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("gpu-throttled")


def test_a_gpu_held_below_its_clock_by_a_slowdown_is_named_with_the_reason_and_its_share():
    evidence, _, _ = _on_gpu("throttled_narrow_shared")  # nvidia-smi's log: 1005 of 1410 MHz, thermal slowdown
    [throttled], run = _findings(evidence, "gpu-throttled")
    assert throttled.severity == Severity.MEDIUM and "1005 of its 1410 MHz" in throttled.message
    assert "software thermal slowdown" in throttled.message and run.margin.value == round(1005 / 1410, 4)


def test_a_power_cap_at_full_clock_is_no_throttling():
    evidence, _, _ = _on_gpu("healthy")
    found, run = _findings(evidence, "gpu-throttled")
    assert found == [] and run.status == "silent"
