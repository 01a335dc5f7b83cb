"""Severity follows measured cost, and a finding whose own fix did not help is demoted."""

from __future__ import annotations

import pytest

from advisor.assembly.build import assemble_report
from advisor.assembly.verification import demote_unhelpful
from advisor.capture.recorded import evidence_from_traces
from advisor.gathered import Gathered
from advisor.report.html import render_html
from advisor.report.markdown import render_markdown
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Severity, Verification
from advisor.rulekit.severity import capped, decide, for_share
from advisor.rulekit.thresholds import SettingError
from advisor.trace.parse import parse_trace
from conftest import ALL_SAMPLES, shared_trace
from devkit.saved_evidence import recorded_samples, saved_evidence


@pytest.mark.parametrize("share, level", [(0.5, "high"), (0.10, "high"), (0.05, "medium"), (0.03, "medium"),
                                          (0.02, "low"), (0.01, "low"), (0.004, "info"), (0.0, "info")])
def test_the_share_scale(share, level):
    assert for_share(share).value == level


def test_a_share_only_lowers_what_a_rule_decided():
    assert capped(Severity.HIGH, 0.02) == Severity.LOW
    assert capped(Severity.INFO, 0.5) == Severity.INFO  # a rule's own reason to say info stays
    assert capped(Severity.MEDIUM, None) == Severity.MEDIUM  # not measured: the rule decides


def test_a_judgement_then_high_at_then_the_declared_severity_decide_before_the_cap():
    assert decide(Severity.LOW, Severity.HIGH, 0.5, high_at=0.9) == Severity.HIGH  # the rule's judgement first
    assert decide(Severity.LOW, None, 0.3, high_at=0.2) == Severity.HIGH
    assert decide(Severity.LOW, None, 0.15, high_at=0.2) == Severity.MEDIUM
    assert decide(Severity.LOW, None, None, high_at=0.2) == Severity.LOW  # unmeasured: as declared
    assert decide(Severity.HIGH, None, 0.05) == Severity.MEDIUM  # capped: 5% of the step


def test_the_scale_and_a_rules_high_threshold_are_settable_and_decided_by_the_engine():
    evidence = saved_evidence("non_contiguous")  # its layout copies: 17% of the step in this recording
    [copies] = [f for f in RuleConfig.load().run(evidence)[0] if f.slug == "non-contiguous"]
    assert copies.severity == Severity.MEDIUM and 0.15 < copies.impact < 0.2  # under its high_at: high_share = 0.2
    lower = RuleConfig.load(settings=("non-contiguous.high_share=0.15",))
    assert [f.severity for f in lower.run(evidence)[0] if f.slug == "non-contiguous"] == [Severity.HIGH]
    strict = RuleConfig.load(settings=("severity.high_share=0.95", "severity.medium_share=0.9"))
    assert [f.severity for f in strict.run(evidence)[0] if f.slug == "non-contiguous"] == [Severity.LOW]
    with pytest.raises(SettingError, match="severity has no threshold 'top'"):
        RuleConfig.load(settings=("severity.top=1",))


@ALL_SAMPLES
def test_every_finding_on_saved_evidence_respects_its_measured_share():
    config = RuleConfig.load()
    for sample in recorded_samples():
        for finding in config.run(saved_evidence(sample))[0]:
            if finding.impact is not None:
                assert finding.severity.rank <= for_share(finding.impact).rank, (sample, finding.slug)


def test_tiny_pageable_copies_on_a_real_gpu_trace_are_info():
    """12 pageable copies per step on a transformer trace, a sliver of its step: noise, not MEDIUM."""
    evidence = evidence_from_traces(parse_trace(str(shared_trace("timeline_analysis/sampled_rank-0.json.gz"))))
    found = {f.slug: f for f in RuleConfig.load().run(evidence)[0]}
    pageable = found["pageable-memcpy"]
    assert pageable.impact is not None and pageable.impact < 0.01
    assert pageable.severity == Severity.INFO, pageable.message


def _report_with(sample: str, slug: str, verification: Verification):
    report = assemble_report(Gathered(evidence=saved_evidence(sample)), RuleConfig.load())
    target = next(f for f in report.findings if f.slug == slug)
    target.verification = verification
    return report, target


def test_a_finding_whose_fix_measured_no_gain_is_demoted_and_leaves_the_summary():
    report, finding = _report_with("non_contiguous", "non-contiguous", Verification(
        status="no-gain", speedup=0.99, ci_low=0.97, ci_high=1.01, baseline_ms=7.2, candidate_ms=7.27,
        samples=40, device="cpu"))
    before = finding.severity
    assert before == Severity.MEDIUM and finding.impact > 0.1
    demote_unhelpful(report)
    assert finding.severity == Severity.INFO and finding.severity_before_demotion == before
    assert "measured no gain here (0.99x [0.97-1.01])" in finding.demoted
    assert "more than the fix can recover (at most 1%" in finding.demoted
    assert finding.impact == pytest.approx(1 - 1 / 1.01, abs=1e-3)
    assert report.findings[-1] is finding  # out of the impact ranking
    html = render_html(report)
    summary = html.split("<h2>Executive summary</h2>")[1].split("</ul>")[0]
    assert "Non-contiguous" not in summary and "non-contiguous" not in summary.lower()
    assert "Demoted from medium to info" in html
    assert "Demoted to info" in render_markdown(report)


def test_a_slower_fix_demotes_and_a_verified_or_unmeasured_one_does_not():
    report, finding = _report_with("non_contiguous", "non-contiguous", Verification(
        status="slower", speedup=0.95, ci_low=0.93, ci_high=0.97, samples=40, device="cpu"))
    demote_unhelpful(report)
    assert finding.severity == Severity.INFO and "measured slower" in finding.demoted and finding.impact == 0
    for status, speedup in (("verified", 1.3), ("not-verifiable-here", None), ("fix-failed", None)):
        report, finding = _report_with("non_contiguous", "non-contiguous", Verification(
            status=status, speedup=speedup, ci_low=speedup, ci_high=speedup, device="cpu"))
        demote_unhelpful(report)
        assert finding.demoted == "" and finding.severity == Severity.MEDIUM, status


def test_a_fix_measured_slower_under_contention_is_not_demoted_and_says_why():
    import json
    from pathlib import Path

    from advisor.machine.state import MeasurementConditions

    recorded = Path(__file__).parent / "data" / "conditions"
    busy = MeasurementConditions.model_validate(json.loads((recorded / "busy_loop.json").read_text()))
    report, finding = _report_with("non_contiguous", "non-contiguous", Verification(
        status="slower", speedup=0.62, ci_low=0.59, ci_high=0.66, samples=40, device="cpu", conditions=busy))
    demote_unhelpful(report)
    assert finding.severity == Severity.MEDIUM and finding.demoted == ""
    assert "its fix measured slower under contention (other processes used 0.50" in finding.unreliable
