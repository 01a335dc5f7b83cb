"""advisor ready on real models: each not-ready sample fails the right check at the right line, a
deployable one passes; the report's readiness section in JSON, HTML, Markdown and SARIF; exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from advisor.commands.ready import ReadyRunOptions, run_ready
from advisor.ready.checks import ReadyOptions
from conftest import SAMPLES, line_of

READY = SAMPLES / "ready"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def readiness(tmp_path_factory):
    """One real `advisor ready` per sample (cached: each takes seconds)."""
    done: dict[str, object] = {}

    def ready(name: str, budget: float | None = None):
        if name not in done:
            out = tmp_path_factory.mktemp(name)
            options = ReadyRunOptions(model_file=str(READY / f"{name}.py"), out_dir=str(out), seconds_per_size=0.5,
                                      checks=ReadyOptions(latency_budget_ms=budget))
            done[name] = run_ready(options).report
        return done[name]
    return ready


def _statuses(report) -> dict[str, str]:
    return {check.id: check.status for check in report.readiness.checks}


def _lines(report, check_id: str) -> set[int]:
    return {location.line for location in report.readiness.check(check_id).locations}


def test_a_deployable_model_passes_every_check_or_says_why_it_skipped(readiness):
    report = readiness("deployable", budget=1000.0)
    assert report.errors == []
    statuses = _statuses(report)
    assert set(statuses) == {"eval-mode", "inference-mode", "export", "compile", "recompiles", "determinism",
                             "latency-budget", "memory", "cold-start", "reduced-precision"}
    assert set(statuses.values()) <= {"pass", "skipped"}, statuses
    for check in report.readiness.checks:
        assert check.message, check.id
    rows = {row.batch_size: row for row in report.readiness.latency}
    assert sorted(rows) == [1, 8, 32]
    for row in rows.values():
        assert row.samples >= 50 and row.p50_ms <= row.p90_ms <= row.p99_ms and row.throughput_per_s > 0
        assert row.p99.ci_low <= row.p99_ms <= row.p99.ci_high and len(row.samples_ms) == row.samples
    assert report.readiness.recommended_batch_size == 32  # the largest whose p99 meets a budget of 1 s
    recompiles = report.readiness.check("recompiles")
    assert recompiles.values["from_user_code"] == 0  # PyTorch's own recompilations are explained, not failed


@pytest.mark.parametrize("sample, check_id, markers", [
    ("left_in_train_mode", "eval-mode", ["BATCHNORM LINE", "DROPOUT LINE"]),
    ("value_branch", "export", ["VALUE BRANCH LINE"]),
    ("fixed_batch_reshape", "latency-budget", ["FIXED BATCH LINE"]),
    ("size_branch", "recompiles", ["SIZE BRANCH LINE"]),
    ("noisy_forward", "determinism", ["NOISE LINE"]),
])
def test_a_model_not_ready_fails_the_right_check_at_the_right_line(readiness, sample, check_id, markers):
    report = readiness(sample)
    assert report.errors == []
    assert report.readiness.check(check_id).status == "fail", report.readiness.check(check_id)
    assert {line_of(READY / f"{sample}.py", marker) for marker in markers} <= _lines(report, check_id)


def test_what_else_the_not_ready_samples_show(readiness):
    branch = _statuses(readiness("value_branch"))
    assert branch["compile"] == "warn" and branch["determinism"] == "pass"  # a graph break, not a failure to run
    assert _lines(readiness("value_branch"), "compile") == {line_of(READY / "value_branch.py", "VALUE BRANCH LINE")}
    fixed = readiness("fixed_batch_reshape")
    failing = {row.batch_size for row in fixed.readiness.latency if row.error}
    assert failing == {1, 32} and "shape '[8, 64]' is invalid" in fixed.readiness.check("latency-budget").message
    sized = readiness("size_branch").readiness.check("recompiles")
    assert sized.values["from_user_code"] == 1 and sized.values["from_pytorch"] >= 1  # batch 8's switch to dynamic
    train = _statuses(readiness("left_in_train_mode"))
    assert train["determinism"] == "fail" and train["reduced-precision"] == "pass"  # same dropout draws each side


def test_the_readiness_reports_and_exit_codes(tmp_path):
    done = subprocess.run([sys.executable, "-m", "advisor", "ready", str(READY / "noisy_forward.py"), "--out",
                           str(tmp_path), "--format", "html,json,md,sarif", "--batch-sizes", "2,4", "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr  # determinism fails
    assert "FAIL    determinism" in done.stdout and "Traceback" not in done.stderr
    saved = json.loads((tmp_path / "noisy_forward.json").read_text())
    assert [row["batch_size"] for row in saved["readiness"]["latency"]] == [2, 4]
    check = next(c for c in saved["readiness"]["checks"] if c["id"] == "determinism")
    assert check["status"] == "fail" and check["locations"][0]["line"] == line_of(READY / "noisy_forward.py", "NOISE LINE")
    assert "`determinism`" in (tmp_path / "noisy_forward.md").read_text()
    sarif = json.loads((tmp_path / "noisy_forward.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["determinism"]
    html = (tmp_path / "noisy_forward.html").read_text()
    assert 'id="check-determinism"' in html and 'id="latency-chart"' in html
    roofs = saved["roofs"]  # where the roofs the precision advice rests on came from: said in each report
    assert roofs["flops_per_s"]["float32"] > 0 and roofs["source"] in ("measured", "cached", "contended")
    assert 'id="roofs"' in html and "Roofs: measured" in done.stdout


def test_a_missing_file_and_a_bad_batch_list_are_clear_errors(tmp_path):
    missing = subprocess.run([sys.executable, "-m", "advisor", "ready", str(tmp_path / "nope.py")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "nope.py: no such file" in missing.stderr and "Traceback" not in missing.stderr
    bad = subprocess.run([sys.executable, "-m", "advisor", "ready", str(READY / "deployable.py"), "--batch-sizes", "0,x"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "positive integers" in bad.stderr
