"""below-roof (ADV146): Attention that runs far below what this machine's matmuls reach, because its heads are too
narrow. Its cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_roofline import RULES

from advisor.rulekit.engine import run_rules
from devkit.saved_evidence import saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("below-roof")


def test_narrow_attention_heads_are_far_below_their_roof_and_said_why():
    [finding] = [f for f in RULES.run(saved_evidence("narrow_heads"))[0] if f.slug == "below-roof"]
    assert finding.evidence["efficiency"] < 0.25 and finding.evidence["share_of_step"] >= 0.1
    assert "heads have 4 dimensions each" in finding.message and "of 64 dimensions" in finding.fix.summary


def test_below_roof_is_silent_on_matmuls_near_their_roof_and_not_run_without_roofs():
    runs = []
    findings, _ = run_rules(RULES.ruleset, saved_evidence("gpt_block"), runs=runs)
    [run] = [r for r in runs if r.slug == "below-roof"]
    assert "below-roof" not in {f.slug for f in findings} and run.status == "silent" and run.margin.value > 0.25
    runs = []
    run_rules(RULES.ruleset, saved_evidence("gpt_block").model_copy(update={"peaks": None}), runs=runs)
    assert [r.status for r in runs if r.slug == "below-roof"] == ["not run"]


def test_a_narrow_product_with_no_share_of_the_step_is_not_a_finding():
    evidence = saved_evidence("narrow_heads")
    slower_peaks = evidence.peaks.model_copy(update={"flops_per_s": {"float32": 1e6}})  # every operator at its roof
    assert "below-roof" not in {f.slug for f in RULES.run(evidence.model_copy(update={"peaks": slower_peaks}))[0]}
