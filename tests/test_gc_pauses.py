"""gc-pauses: the garbage collector's share of an audited script's steps, fired on a loop that keeps tracked records,
silent on one that keeps none; and the collector's passes counted per step in the script's process."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import pytest

from advisor.evidence import Evidence, TargetInfo, Timing
from advisor.machine.collector_pauses import CollectorPauses
from advisor.rulekit.engine import load_rules, run_rules
from advisor.run.collector import CollectorWatch
from conftest import SAMPLES

RULES = load_rules()
SCRIPT = "/w/train.py"
RECORDED = Path(__file__).parent / "data" / "collector"  # python tests/record_evidence.py --collector
# gc-pauses' positive: a real advisor run of samples/scripts/gc_records.py (tests/test_rules_on_evidence.py)
RECORDED_GC_POSITIVES = {"gc-pauses": "gc_records.json"}


def _evidence(step_ms: list[float], collector_ms: list[float], passes=(30, 3, 1)) -> Evidence:
    return Evidence(target=TargetInfo(model_file=SCRIPT, mode="train"),
                    timing=Timing.of_samples(step_ms, "perf_counter", 3),
                    collector=CollectorPauses(per_step_ms=collector_ms, passes=list(passes), thresholds=[700, 10, 10]))


def _gc_pauses(evidence: Evidence):
    runs = []
    findings, problems = run_rules(RULES, evidence, runs=runs)
    assert problems == []
    [run] = [r for r in runs if r.slug == "gc-pauses"]
    return [f for f in findings if f.slug == "gc-pauses"], run


def _recorded(script: str) -> Evidence:
    recorded = json.loads((RECORDED / f"{script}.json").read_text(encoding="utf-8"))
    return Evidence(target=TargetInfo(model_file=f"{script}.py", mode="train"),
                    timing=Timing.of_samples(recorded["samples_ms"], "perf_counter", 3),
                    collector=CollectorPauses.model_validate(recorded["collector"]))


def test_the_recorded_trainer_that_keeps_its_records_fires_and_the_clean_one_does_not():
    [finding], run = _gc_pauses(_recorded("gc_records"))
    assert finding.severity.value in ("medium", "high") and finding.evidence["share_of_step"] >= 0.1
    assert finding.evidence["passes_by_generation"][2] >= 1  # the full pass that made its slowest step
    findings, run = _gc_pauses(_recorded("clean_train"))
    assert findings == [] and run.status == "silent" and run.margin.value < 0.1


def test_a_loop_that_spends_a_third_of_its_time_collecting_is_high_and_says_its_slowest_step():
    steps = [2.0] * 19 + [60.0]  # one full pass in the last step
    collecting = [0.5] * 19 + [58.0]
    [finding], run = _gc_pauses(_evidence(steps, collecting))
    assert finding.severity.value == "high" and finding.impact == pytest.approx(67.5 / 98.0, abs=1e-3)
    assert finding.evidence["slowest_step_collector_ms"] == 58.0 and finding.evidence["passes_by_generation"] == [30, 3, 1]
    assert "gc.freeze()" in finding.fix.summary and "set_threshold" in finding.fix.summary
    assert run.status == "fired" and run.margin.threshold == 0.1


def test_a_loop_that_collects_little_is_silent_with_its_share():
    findings, run = _gc_pauses(_evidence([2.0] * 20, [0.05] * 20))
    assert findings == [] and run.status == "silent" and run.margin.value == pytest.approx(0.025)


def test_an_audit_without_the_collector_watched_does_not_run_it():
    findings, run = _gc_pauses(Evidence(target=TargetInfo(model_file=SCRIPT, mode="train"),
                                        timing=Timing.of_samples([2.0] * 20, "perf_counter", 3)))
    assert findings == [] and run.status == "not run" and "garbage collector was not watched" in run.why


def test_the_collectors_passes_are_summed_per_timed_step():
    watch = CollectorWatch()
    try:
        gc.collect()
        watch.step_ended(timed=False)  # a pass outside the timed steps counts nowhere
        gc.collect(0)
        gc.collect(2)
        watch.step_ended(timed=True)
        watch.step_ended(timed=True)  # a step with no pass
    finally:
        watch.remove()
    measured = watch.measured()
    assert len(measured["per_step_ms"]) == 2 and measured["per_step_ms"][0] > 0 and measured["per_step_ms"][1] == 0
    assert measured["passes"] == [1, 0, 1]
    gc.collect()
    assert watch.measured()["passes"] == [1, 0, 1]  # removed: no longer listening


@pytest.mark.slow
def test_advisor_run_reports_the_collectors_share_of_a_trainer_that_keeps_its_records(tmp_path):
    from advisor.commands.run import RunOptions, run_script

    script = SAMPLES / "scripts" / "gc_records.py"
    report = run_script(RunOptions(command=(sys.executable, str(script)), out_dir=str(tmp_path), verify=False)).report
    [finding] = [f for f in report.findings if f.slug == "gc-pauses"]
    assert finding.severity.value in ("medium", "high") and finding.evidence["share_of_step"] >= 0.1
    assert sum(finding.evidence["passes_by_generation"]) > 0
