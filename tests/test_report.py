"""Reports: the JSON schema round trip, the self-contained and escaped HTML, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from advisor.report.html import render_html
from advisor.report.schema import SCHEMA_VERSION, Report
from conftest import HOSTILE_MODEL, SAMPLES, audit, line_of, write_model


@pytest.mark.slow
def test_json_round_trips_through_the_schema(sample_audit):
    report = sample_audit("host_sync").report
    text = report.model_dump_json()
    again = Report.model_validate_json(text)
    assert again == report
    data = json.loads(text)
    assert data["schema_version"] == SCHEMA_VERSION
    assert all(f["slug"] for f in data["findings"]) and data["findings"][0]["locations"][0]["line"] > 0
    assert set(data) >= {"target", "environment", "timing", "graph", "trace", "findings", "errors", "stages"}


@pytest.mark.slow
def test_failed_audits_round_trip_with_their_errors(tmp_path):
    path = write_model(tmp_path, "import torch\ndef get_model(): raise OSError('disk')\ndef get_inputs(): return 1\n")
    report = audit(path, tmp_path / "out").report
    assert Report.model_validate_json(report.model_dump_json()) == report
    assert report.errors[0].message == "get_model() raised OSError: disk"


@pytest.mark.slow
def test_html_is_self_contained(sample_audit):
    html = render_html(sample_audit("host_sync").report)
    assert "<script src" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"""(src|url)\s*[=(]\s*["']?https?:""", html)
    assert "Device-to-host synchronization inside the step" in html
    item_line = line_of(SAMPLES / "host_sync.py", ".item() > 0.5")
    assert f"host_sync.py:{item_line}</td>" in html  # the finding's location, pinned to the line


@pytest.mark.slow
def test_hostile_names_from_the_model_stay_text(tmp_path):
    path = write_model(tmp_path, HOSTILE_MODEL)
    result = audit(path, tmp_path / "out")
    assert result.report.target.model_class == "<script>alert('class')</script>"
    assert result.report.findings, "the hostile line must reach the report through a finding"
    html = render_html(result.report)
    assert html.count("<script>") == 1 and "<script>alert(" not in html and "<img" not in html  # ours only
    assert "&lt;script&gt;alert(" in html and "&lt;img src=x onerror=alert(1)&gt;" in html


@pytest.mark.slow
def test_exit_codes_follow_fail_on_and_formats_are_chosen(tmp_path):
    base = [sys.executable, "-m", "advisor", "audit", str(SAMPLES / "host_sync.py"), "--quiet", "--no-verify"]
    strict = subprocess.run(base + ["--out", str(tmp_path / "a"), "--fail-on", "low", "--format", "json"],
                            capture_output=True, text=True, timeout=300)
    assert strict.returncode == 1
    assert (tmp_path / "a" / "host_sync.json").exists() and not (tmp_path / "a" / "host_sync.html").exists()
    assert (tmp_path / "a" / "host_sync.trace.json.gz").exists()
    assert "LOW    ADV101 host-sync" in strict.stdout and "JSON report:" in strict.stdout  # a CPU run: LOW at most
    bad = subprocess.run(base + ["--format", "pdf"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "subset of html,json" in bad.stderr


@pytest.mark.slow
def test_default_fail_on_high_passes_a_cpu_audit_with_medium_findings(sample_audit):
    result = sample_audit("host_sync")
    assert result.exit_code("high") == 0 and result.exit_code("medium") == 1
    assert sample_audit("train_with_loader").exit_code("info") == 0  # float32 only: nothing on any CPU


def test_paths_are_shown_resolved_and_relative_inside_the_working_folder(tmp_path, monkeypatch):
    import os

    from advisor.report.paths import short_path

    (tmp_path / "work" / "data").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    assert short_path("data/../data/train.py") == os.path.join("data", "train.py")
    assert short_path(str(tmp_path / "work" / "data" / ".." / "train.py")) == "train.py"
    assert short_path("data/../../upstream/train.py") == str(tmp_path / "upstream" / "train.py")  # outside: absolute
