"""gc-pauses: the garbage collector's share of an audited script's steps, fired on a loop that keeps tracked records,
silent on one that keeps none; and the collector's passes counted per step in the script's process."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from pathlib import Path

import pytest
import torch
from test_step_log import recorded_run

from advisor.evidence import Evidence, TargetInfo, Timing
from advisor.machine.collector_pauses import CollectorPauses
from advisor.rulekit.engine import load_rules, run_rules
from advisor.script.collector import CollectorWatch
from conftest import SAMPLES
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("gc-pauses")

RULES = load_rules()
SCRIPT = "/w/train.py"


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


def test_the_recorded_trainer_that_keeps_its_records_fires_and_the_clean_one_does_not():
    [finding], run = _gc_pauses(recorded_run("gc_records"))
    assert finding.severity.value in ("medium", "high") and finding.evidence["share_of_step"] >= 0.1
    assert finding.evidence["passes_by_generation"][2] >= 1  # the full pass that made its slowest step
    [place] = finding.locations  # where the records that outlive each step are made
    assert Path(place.file).name == "gc_records.py" and place.line == _line_of("records.append(")
    assert "objects made in one step at gc_records.py" in finding.message
    findings, run = _gc_pauses(recorded_run("clean_train"))
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


def _line_of(text: str) -> int:
    lines = (SAMPLES / "scripts" / "gc_records.py").read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def test_the_survivors_of_a_traced_warm_up_step_are_counted_at_the_line_that_made_them():
    watch, kept = CollectorWatch(), []
    try:
        watch.trace_step(count=1, warmup=3)  # the warm-up's last step but one is traced
        kept.extend({"tags": [i]} for i in range(1000))  # the line below makes them
        kept.extend([i] for i in range(300))
        watch.trace_step(count=2, warmup=3)
    finally:
        watch.remove()
    first, second = watch.measured()["survivors"][:2]
    # 1000 dicts and 1000 lists, 300 lists: up to 80 of each kind come from the interpreter's free lists, which
    # tracemalloc does not see
    assert first["file"] == __file__ and first["objects"] >= 1800
    assert second["objects"] >= 200 and second["line"] == first["line"] + 1
    assert not tracemalloc.is_tracing()


def test_no_step_is_traced_when_the_warm_up_has_none_before_its_last():
    watch = CollectorWatch()
    try:
        for count in range(1, 4):
            watch.trace_step(count=count, warmup=2)
    finally:
        watch.remove()
    assert watch.measured()["survivors"] == [] and not tracemalloc.is_tracing()


def test_the_fix_raises_the_collectors_thresholds_only_while_it_is_on():
    from advisor.workload.target import Target

    [rule] = [r for r in RULES.rules if r.slug == "gc-pauses"]
    target = Target(path=SCRIPT, module=None, model=None, inputs=None, mode="train", device=torch.device("cpu"))
    fixed = rule.fix_spec.apply(target, None)
    assert rule.fix_spec.whole_runs and target.step_contexts == ()
    before = gc.get_threshold()
    with fixed.step_contexts[-1]():
        assert gc.get_threshold() == (50_000, 20, 100)
    assert gc.get_threshold() == before


@pytest.mark.slow
def test_advisor_run_verifies_the_raised_thresholds_on_a_trainer_that_keeps_its_records(tmp_path):
    from advisor.commands.run import RunOptions, run_script

    script = SAMPLES / "scripts" / "gc_records.py"
    report = run_script(RunOptions(command=(sys.executable, str(script)), out_dir=str(tmp_path), budget=60.0)).report
    [finding] = [f for f in report.findings if f.slug == "gc-pauses"]
    verification = finding.verification
    assert verification.status == "verified" and verification.ci_low > 1.0, verification
    assert verification.timed == "run" and "whole runs" in verification.note  # the passes fall on a few steps


def test_a_line_that_made_few_of_the_survivors_is_not_where_the_finding_points():
    evidence = _evidence([2.0] * 19 + [60.0], [0.5] * 19 + [58.0])
    evidence.collector.survivors = [{"file": "/usr/lib/python3/site-packages/lib/records.py", "line": 9, "objects": 4000},
                                    {"file": SCRIPT, "line": 12, "objects": 40}]
    [finding], _ = _gc_pauses(evidence)
    assert finding.locations == [] and "outlived it" not in finding.message
    evidence.collector.survivors[1]["objects"] = 3000
    [finding], _ = _gc_pauses(evidence)
    assert [(loc.file, loc.line) for loc in finding.locations] == [(SCRIPT, 12)]
