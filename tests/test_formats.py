"""Markdown (snapshot), SARIF (structure of 2.1.0) and `advisor diff` (the CI gate)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.evidence import Environment, TargetInfo, Timing
from advisor.report.compare import between_runs, diff_reports, render_html, render_text
from advisor.report.markdown import render_markdown
from advisor.report.sarif import render_sarif
from advisor.report.schema import Report, VerificationSettings
from advisor.rulekit.identity import assign_ids
from advisor.rulekit.rule import Finding, Fix, Layer, Location, Severity, Verification
from advisor.stats import relative_spread

DATA = Path(__file__).parent / "data"


def _report(step_ms: float = 10.0, findings: list[Finding] | None = None) -> Report:
    findings = findings if findings is not None else [_finding()]
    assign_ids(findings)  # as the engine names every finding it reports
    return Report(
        advisor_version="0.1.0", created="2026-01-01T00:00:00+00:00",
        target=TargetInfo(model_file="/w/model.py", model_class="Net", mode="train", device="cpu"),
        timing=Timing(timer="perf_counter", warmup_steps=3, samples_ms=[step_ms] * 10, median_ms=step_ms,
                      p25_ms=step_ms, p75_ms=step_ms, min_ms=step_ms, cv=0.0, windows_ms=[step_ms] * 3,
                      run_noise=0.0),  # a run whose windows agreed exactly: only the samples' spread counts
        findings=findings,
        verification=VerificationSettings(combined=Verification(status="verified", speedup=1.5, ci_low=1.4,
                                                                ci_high=1.6, samples=40)),
    )


def _finding(slug: str = "non-contiguous", line: int = 7, message: str = "copies take 30% | of <the> step") -> Finding:
    return Finding(
        slug=slug, code="ADV102", title="Layout copies", layer=Layer.MODEL, severity=Severity.HIGH,
        message=message, locations=[Location(file="/w/model.py", line=line, code="y = y.permute(0, 2, 3, 1).contiguous()",
                                             note="paid by .contiguous()")],
        fix=Fix(summary="use channels_last", before="y = y.contiguous()", after="y = y", docs=["https://pytorch.org/x"]),
        verification=Verification(status="verified", speedup=1.5, ci_low=1.4, ci_high=1.6, samples=40, note="exact"),
    )


def test_markdown_matches_the_snapshot():
    assert render_markdown(_report()) == (DATA / "report_snapshot.md").read_text(encoding="utf-8")


def test_markdown_keeps_hostile_text_out_of_the_table_and_out_of_html():
    text = render_markdown(_report(findings=[_finding(message="a | b <script>x</script>\nnew row")]))
    row = next(line for line in text.splitlines() if line.startswith("| 🔴"))
    assert row.count(" | ") == 4 and "<script>" not in text and "&lt;script&gt;" in text


def test_sarif_has_the_required_2_1_0_structure():
    document = json.loads(render_sarif(_report()))
    assert document["version"] == "2.1.0" and document["$schema"].endswith("sarif-2.1.0.json")
    run = document["runs"][0]
    assert run["tool"]["driver"]["name"] == "advisor"
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["ADV102"]
    [result] = run["results"]
    assert result["ruleId"] == "ADV102" and result["ruleIndex"] == 0 and result["level"] == "error"
    assert result["message"]["text"].startswith("copies take 30%")
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == 7 and result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert "null" not in json.dumps(document)  # validators reject nulls where types are required


@pytest.mark.slow
def test_sarif_validates_against_the_official_schema(sample_audit):
    schema_path = Path(__file__).parent / ".cache" / "sarif-2.1.0.json"
    if not schema_path.exists():
        pytest.skip("the SARIF 2.1.0 schema was not fetched (.ci/run gets it from the npm registry)")
    import jsonschema

    from advisor.report.readiness import Readiness, ReadyCheck

    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    ready = Report(target=TargetInfo(model_file="x.py"), readiness=Readiness(checks=[
        ReadyCheck(id="determinism", status="fail", message="m", locations=[Location(file="x.py", line=3, code="y")]),
        ReadyCheck(id="compile", status="warn", message="w")]))
    for report in (_report(), sample_audit("host_sync").report, Report(target=TargetInfo(model_file="x.py")), ready):
        jsonschema.Draft4Validator(schema).validate(json.loads(render_sarif(report)))


def test_diff_reports_regressions_added_and_resolved():
    old = _report(10.0, [_finding("non-contiguous", 7), _finding("host-sync", 9)])
    new = _report(11.0, [_finding("non-contiguous", 7), _finding("kernel-storm", 3)])
    result = diff_reports(old, new, threshold=0.05)
    assert abs(result.step_change - 0.10) < 1e-9 and result.regressed
    assert [f.slug for f in result.added] == ["kernel-storm"] and [f.slug for f in result.resolved] == ["host-sync"]
    assert "REGRESSION" in render_text(result)
    assert not diff_reports(old, _report(10.4, old.findings), threshold=0.05).regressed
    page = render_html(diff_reports(old, _report(10.0, [_finding("x", 1, "<img src=y>")])))
    assert "<img" not in page and "&lt;img src=y&gt;" in page


def test_the_diff_as_markdown_lists_what_the_change_added_and_resolved_for_a_pull_requests_comment():
    from advisor.report.diff_markdown import render_diff_markdown

    old = _report(10.0, [_finding("host-sync", 12), _finding("zero-grad", 3)])
    new = _report(10.0, [_finding("zero-grad", 3), _finding("kernel-storm", 40, "a | pipe <b>")])
    text = render_diff_markdown(diff_reports(old, new))
    assert "### Added: 1" in text and "### Resolved: 1" in text and "Unchanged: 1" in text
    added = text.split("### Added: 1")[1].split("### Resolved")[0]
    assert "`ADV" in added and "kernel-storm" in added and "host-sync" not in added
    assert "a \\| pipe &lt;b&gt;" in added  # the user's text stays one cell, no markup
    assert "Step time: 10 ms → 10 ms:" in text and "regression" not in text
    unjudged = render_diff_markdown(diff_reports(old, new, judge_step=False))
    assert "not judged here" in unjudged


@pytest.mark.slow
def test_diff_cli_exit_codes(tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(_report(10.0).model_dump_json())
    new.write_text(_report(12.0).model_dump_json())
    command = [sys.executable, "-m", "advisor", "diff"]
    slower = subprocess.run(command + [str(old), str(new), "--html", str(tmp_path / "d.html"), "--markdown",
                                       str(tmp_path / "d.md")], capture_output=True, text=True, timeout=60)
    assert slower.returncode == 1 and "+20.0%" in slower.stdout and (tmp_path / "d.html").exists()
    assert "Step time: 10 ms → 12 ms: **regression**" in (tmp_path / "d.md").read_text()
    lenient = subprocess.run(command + [str(old), str(new), "--threshold", "0.25"], capture_output=True, text=True, timeout=60)
    assert lenient.returncode == 0
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    bad = subprocess.run(command + [str(old), str(broken)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not an advisor JSON report" in bad.stderr and "Traceback" not in bad.stderr
    unwritable = subprocess.run(command + [str(old), str(new), "--html", str(tmp_path / "no" / "d.html")],
                                capture_output=True, text=True, timeout=60)
    assert unwritable.returncode == 2 and f"{tmp_path / 'no' / 'd.html'}: cannot write the diff" in unwritable.stderr
    assert "Traceback" not in unwritable.stderr


def test_diff_fails_on_an_added_finding_only_at_or_above_the_severity_asked(tmp_path):
    from advisor.commands.diff import DiffOptions, run_diff

    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(_report(findings=[]).model_dump_json())
    new.write_text(_report().model_dump_json())  # the same step, one HIGH finding added

    def gate(fail_on):
        return run_diff(DiffOptions(old_report=str(old), new_report=str(new), fail_on=fail_on))
    assert gate(None).exit_code == 0 and gate("low").exit_code == 1
    failing = gate("high")
    assert failing.exit_code == 1 and "FAIL: 1 finding(s) added at or above high: ADV102 non-contiguous" in failing.text
    kept = tmp_path / "kept.json"
    kept.write_text(_report().model_dump_json())
    assert run_diff(DiffOptions(old_report=str(new), new_report=str(kept), fail_on="low")).exit_code == 0  # not added


def test_two_findings_of_one_rule_at_one_place_are_two_in_the_diff():
    old = _report(findings=[_finding("host-sync", 9), _finding("host-sync", 9)])
    new = _report(findings=[_finding("host-sync", 9)])
    result = diff_reports(old, new)
    assert len(result.kept) == 1 and len(result.resolved) == 1 and result.added == []


def _sited(lines_and_code: list[tuple[int, str]], impact: float = 0.3, message: str = "copies take 30%") -> Finding:
    finding = _finding("non-contiguous", message=message)
    finding.impact = impact
    finding.locations = [Location(file="/w/model.py", line=line, code=code) for line, code in lines_and_code]
    return finding


def test_a_findings_identity_ignores_the_order_of_its_places():
    """Two sites of nearly equal cost swap places between runs: the same finding, unchanged."""
    old = _report(findings=[_sited([(7, "y = y.permute(0, 2, 1)"), (9, "z = z.transpose(1, 2)")])])
    new = _report(findings=[_sited([(9, "z = z.transpose(1, 2)"), (7, "y = y.permute(0, 2, 1)")])])
    result = diff_reports(old, new)
    assert old.findings[0].id == new.findings[0].id
    assert (result.added, result.resolved, len(result.kept), result.moved) == ([], [], 1, [])


def test_a_findings_identity_survives_an_edit_above_it():
    """Three lines added above the place: the code there is the same, the finding is kept and says it moved."""
    old = _report(findings=[_sited([(7, "y = y.permute(0, 2, 1)")])])
    new = _report(findings=[_sited([(10, "y  =  y.permute(0, 2, 1)")])])  # reformatted whitespace too
    result = diff_reports(old, new)
    assert result.added == [] and result.resolved == [] and len(result.kept) == 1
    [(_, said)] = result.moved
    assert "now at model.py:10 (was model.py:7)" in said and "now at model.py:10" in render_text(result)
    changed = _report(findings=[_sited([(7, "y = y.permute(0, 1, 2)")])])  # the code at the place changed
    assert len(diff_reports(old, changed).added) == 1


def test_a_finding_whose_numbers_moved_is_unchanged_with_the_change_shown():
    old = _report(findings=[_sited([(7, "y = y.permute(0, 2, 1)")], impact=0.61, message="61% of the step")])
    new = _report(findings=[_sited([(7, "y = y.permute(0, 2, 1)")], impact=0.67, message="67% of the step")])
    result = diff_reports(old, new)
    assert (result.added, result.resolved) == ([], []) and not result.regressed
    assert result.moved[0][1] == "share of the step 61.0% -> 67.0%"
    assert "ADV102 non-contiguous: share of the step 61.0% -> 67.0%" in render_text(result)
    assert "61.0% -&gt; 67.0%" in render_html(result)


def test_identical_lines_in_one_file_are_told_apart_by_which_occurrence_they_are(tmp_path):
    source = tmp_path / "model.py"
    source.write_text("x = x.contiguous()\ny = 1\nx = x.contiguous()\n", encoding="utf-8")
    first, second = (_finding() for _ in range(2))
    first.locations = [Location(file=str(source), line=1, code="x = x.contiguous()")]
    second.locations = [Location(file=str(source), line=3, code="x = x.contiguous()")]
    assign_ids([second, first])
    assert first.id != second.id and "-" not in first.id.split("-", 1)[1]  # no duplicate numbering needed


def test_runs_on_different_machines_torch_or_devices_are_not_compared_on_time():
    old, new = _report(10.0), _report(13.0)
    old.environment = Environment(cpu_model="AMD EPYC 7B13", cpu_cores_available=2, torch_version="2.13.0")
    new.environment = Environment(cpu_model="Intel Xeon 8481C", cpu_cores_available=2, torch_version="2.13.0")
    result = diff_reports(old, new)
    assert not result.regressed and "not judged (the runs differ in CPU AMD EPYC 7B13 vs Intel Xeon 8481C" in render_text(result)
    new.environment = old.environment.model_copy(update={"torch_version": "2.14.0"})
    assert "torch 2.13.0 vs 2.14.0" in diff_reports(old, new).incomparable
    new.environment = old.environment
    assert diff_reports(old, new).regressed  # the same machine: +30% is a regression
    new.target = new.target.model_copy(update={"device": "cuda"})
    assert not diff_reports(old, new).regressed and "device cpu vs cuda" in diff_reports(old, new).incomparable


def _noisy(median: float, spread: float, n: int = 10, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_the_diff_gate_decides_from_the_runs_own_spread():
    # the flapping case seen on one sample: 59 ms steps, one run spread 57-75 ms, the other 54-57 ms
    old, new = _report(), _report()
    old.timing.samples_ms = [57.0, 58.0, 59.0, 61.0, 66.0, 70.0, 72.0, 75.0, 58.5, 60.0]
    new.timing.samples_ms = [54.0, 54.5, 55.0, 55.5, 56.0, 56.5, 57.0, 55.2, 54.8, 56.2]
    result = diff_reports(old, new, threshold=0.05)
    assert result.step.verdict == "within noise" and not result.regressed
    assert "within noise (±" in render_text(result) and "--remeasure OLD_MODEL_FILE NEW_MODEL_FILE" in render_text(result)
    from advisor.evidence import StepReading
    old.target.step = StepReading(summary="1 forward", recognised_by="each step of AdamW")  # a script's run
    assert "--remeasure OLD_SCRIPT NEW_SCRIPT [-- ARGS]" in render_text(result)
    steady_old, steady_new = _report(), _report()
    steady_old.timing.samples_ms, steady_new.timing.samples_ms = _noisy(10.0, 0.01, 30), _noisy(12.0, 0.01, 30, seed=1)
    assert diff_reports(steady_old, steady_new).step.verdict == "slower" and diff_reports(steady_old, steady_new).regressed
    steady_new.timing.samples_ms = _noisy(10.1, 0.01, 30, seed=1)
    assert diff_reports(steady_old, steady_new).step.verdict == "unchanged"


def test_a_remeasure_whose_interval_reaches_zero_is_measured_and_inconclusive_not_unmeasured():
    # two noisy pairs of whole runs: the speedup's interval [0, 11785] (clamped at 0) was called "not measured"
    from advisor.commands.remeasure import RemeasureResult
    wide = RemeasureResult(Verification(status="inconclusive", speedup=0.70, ci_low=0.0, ci_high=11785.0, samples=2,
                                        baseline_ms=100.0, candidate_ms=142.0, timed="runs", note="timing only"), 0.05)
    assert wide.change.verdict == "within noise" and wide.exit_code == 0
    assert "remeasured step time: 100 ms -> 142 ms" in wide.text and "of whole runs" in wide.text
    assert "unbounded]: within noise (too few samples to bound it)" in wide.text and "inf" not in wide.text
    slower = RemeasureResult(wide.measured.model_copy(update={"ci_low": 0.5, "ci_high": 0.8}), 0.05)
    assert slower.change.verdict == "slower" and slower.exit_code == 1
    unmeasured = RemeasureResult(Verification(status="skipped", note="no window"), 0.05)
    assert unmeasured.change is None and unmeasured.exit_code == 2 and "not measured" in unmeasured.text


def _windowed(median: float, noise: float, seed: int) -> Report:
    """A quiet run as the timing stage records one: 12 samples in three windows whose medians differ by ``noise``."""
    report = _report(median)
    rng = random.Random(seed)
    medians = [median * (1 + noise * offset) for offset in (-1.0, 0.0, 1.0)]
    report.timing.samples_ms = [m * (1 + rng.uniform(-0.005, 0.005)) for m in medians for _ in range(4)]
    report.timing.windows_ms, report.timing.run_noise = medians, relative_spread(medians)
    return report


def test_the_diff_gate_counts_the_noise_between_runs():
    """Two audits of unchanged code differ by more than either's samples spread (gpt_block: +10% [+5.8%, +15.9%]
    from within-run samples alone, both runs quiet): the windows' spread widens the interval, so such a pair
    is within noise, while a 25% slower step is still caught."""
    old = _windowed(32.5, 0.03, seed=0)
    flapping = diff_reports(old, _windowed(35.75, 0.03, seed=1))
    assert flapping.step.verdict == "within noise" and not flapping.regressed
    assert flapping.step.noise > 0.05 and "run-to-run" in render_text(flapping)
    assert diff_reports(_windowed(35.75, 0.03, seed=1), old).step.verdict == "within noise"  # and back: no "faster"
    slower = diff_reports(old, _windowed(32.5 * 1.25, 0.03, seed=2))
    assert slower.step.verdict == "slower" and slower.regressed


def test_a_run_that_did_not_measure_its_noise_counts_as_the_measured_worst():
    old, new = _windowed(10.0, 0.0, seed=0), _windowed(11.0, 0.0, seed=1)
    assert diff_reports(old, new).regressed  # both measured their windows: agreeing exactly, +10% is real
    new.timing.windows_ms, new.timing.run_noise = [], None  # a script's window: no run-to-run figure
    assert diff_reports(old, new).step.noise == pytest.approx(between_runs(old.timing, new.timing))
    assert not diff_reports(old, new).regressed


def test_a_finding_decided_within_its_noise_is_borderline_not_added_or_resolved():
    from advisor.rulekit.rule import Margin

    near = _finding(slug="missing-amp", line=9)
    near.margin = Margin(quantity="matmul share of the step", value=0.52, threshold=0.5, noise=0.05)
    clear = _finding(slug="channels-last", line=11)
    clear.margin = Margin(quantity="convolution share of the step", value=0.6, threshold=0.25, noise=0.06)
    result = diff_reports(_report(findings=[]), _report(findings=[near, clear]))
    assert [f.slug for f in result.borderline] == ["missing-amp"] and [f.slug for f in result.added] == ["channels-last"]
    back = diff_reports(_report(findings=[near]), _report(findings=[]))
    assert back.resolved == [] and [f.slug for f in back.borderline] == ["missing-amp"]
    assert "borderline" in render_text(back)


def test_readiness_reports_diff_by_check_status_and_latency_percentiles():
    from advisor.ready.latency import _fill
    from advisor.report.readiness import LatencyRow, Readiness, ReadyCheck

    def ready(status: str, p_ms: float) -> Report:
        row = LatencyRow(batch_size=8)
        _fill(row, [_noisy(p_ms, 0.02, 34, seed=k) for k in range(3)])
        report = _report(findings=[])
        report.readiness = Readiness(checks=[ReadyCheck(id="export", status=status, message="m")], latency=[row])
        return report
    same = diff_reports(ready("pass", 1.0), ready("pass", 1.0))
    assert same.checks == [] and same.latency[0].p50.verdict == "unchanged" and not same.regressed
    worse = diff_reports(ready("pass", 1.0), ready("fail", 1.0))
    assert [(c.id, c.old, c.new) for c in worse.checks] == [("export", "pass", "fail")] and worse.regressed
    slower = diff_reports(ready("pass", 1.0), ready("pass", 1.5))
    assert slower.latency[0].p50.verdict == "slower" and slower.regressed and "batch 8: p50 +" in render_text(slower)


def test_a_readiness_check_decided_within_its_noise_does_not_fail_the_gate():
    from advisor.report.readiness import Readiness, ReadyCheck

    def ready(status: str, borderline: bool) -> Report:
        report = _report(findings=[])
        report.readiness = Readiness(checks=[ReadyCheck(id="latency-budget", status=status, message="m",
                                                        borderline=borderline)])
        return report
    flapping = diff_reports(ready("pass", False), ready("warn", True))  # the p99's interval now crosses the budget
    assert flapping.checks[0].borderline and not flapping.regressed and "borderline" in render_text(flapping)
    assert diff_reports(ready("pass", False), ready("fail", False)).regressed
