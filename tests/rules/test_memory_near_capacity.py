"""memory-near-capacity (ADV148): The step's peak memory is close to what the device (or the process) can hold. Its
cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_memory import RULES

from advisor.rulekit.engine import run_rules
from devkit.saved_evidence import as_cuda, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("memory-near-capacity")


def _near_capacity(evidence):
    runs = []
    findings, _ = run_rules(RULES.ruleset, evidence, runs=runs)
    [run] = [r for r in runs if r.slug == "memory-near-capacity"]
    return [f for f in findings if f.slug == "memory-near-capacity"], run


def test_a_step_near_its_capacity_is_named_with_the_kind_that_holds_the_peak():
    evidence = saved_evidence("gpt_block")
    full = evidence.memory.model_copy(update={"capacity_bytes": int(evidence.memory.peak_bytes / 0.93),
                                              "capacity_kind": "the device's memory"})  # as on a GPU filled to 93%
    [finding], run = _near_capacity(as_cuda(evidence).model_copy(update={"memory": full}))
    assert finding.severity.value == "high" and finding.evidence["largest_kind"] == "activations"
    assert "torch.utils.checkpoint" in finding.fix.summary and run.margin.value == pytest.approx(0.93, abs=0.001)
    findings, run = _near_capacity(evidence)  # the same step on this machine's RAM
    assert findings == [] and run.status == "silent" and run.margin.value < 0.01
