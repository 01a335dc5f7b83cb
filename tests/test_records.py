"""Records: plain dataclasses written as JSON by advisor, validated by pydantic only as they are read back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from advisor.rulekit.rule import Finding, Layer, Location, Margin, Severity, Verification


def _finding() -> Finding:
    return Finding(slug="host-sync", message="m", layer=Layer.APPLICATION, severity=Severity.HIGH,
                   evidence={"per_step": 3, "ratio": float("inf"), "where": ("a.py", 3)},
                   locations=[Location(file="a.py", line=3, snippet=[(2, "x"), (3, "y.item()")])],
                   verification=Verification(status="verified", speedup=1.5),
                   margin=Margin(quantity="share", value=0.2, threshold=0.1, noise=0.02))


def test_a_record_is_written_as_json_and_read_back_equal():
    finding = _finding()
    data = json.loads(finding.model_dump_json())
    assert data["severity"] == "high" and data["layer"] == Layer.APPLICATION.value
    assert data["locations"][0]["snippet"] == [[2, "x"], [3, "y.item()"]]
    assert data["evidence"]["ratio"] is None  # not JSON's Infinity: pydantic's convention, so it reads back
    back = Finding.model_validate_json(finding.model_dump_json(indent=2))
    assert back.severity is Severity.HIGH and back.locations[0].snippet[1] == (3, "y.item()")
    assert back.verification == finding.verification and back.margin.borderline is False


def test_what_comes_in_from_outside_is_validated():
    with pytest.raises(ValidationError):
        Finding.model_validate({"message": "m", "severity": "dreadful"})
    with pytest.raises(ValidationError):
        Location.model_validate_json('{"file": "a.py"}')  # no line
    assert Location.model_validate({"file": "a.py", "line": "7"}).line == 7


def test_records_take_keywords_only_and_copies_leave_the_original_alone():
    with pytest.raises(TypeError):
        Location("a.py", 3)
    finding = _finding()
    copied = finding.model_copy(update={"message": "other"})
    assert copied.message == "other" and finding.message == "m" and copied.locations is finding.locations
    assert "verification" not in finding.model_dump(exclude={"verification"})


def test_a_field_without_a_json_form_is_named():
    with pytest.raises(TypeError, match="object"):
        Finding(message="m", evidence={"x": object()}).model_dump_json()


def test_analyzing_a_trace_does_not_import_pydantic(tmp_path):
    """Nothing a trace's audit reads needs validating: pydantic's import alone is a quarter of its time."""
    from devkit.saved_evidence import EVIDENCE_DIR

    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "advisor", "analyze",
                           str(EVIDENCE_DIR / "host_sync.trace.json.gz"), "--format", "json", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert list(tmp_path.glob("*.json")), done.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "advisor.rulekit.rule" in imported  # the listing is the analysis's imports
    assert not [name for name in imported if name.split(".")[0] in ("pydantic", "pydantic_core")]
