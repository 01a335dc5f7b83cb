"""The parent/child contract: each kind of child gets a typed spec, checked when written and when read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from advisor.files.activate import FileLayerSpec
from advisor.rulekit.rule import Finding, Layer, Severity
from advisor.run.window_spec import BlocksSpec, WindowSpec, read_window_spec
from advisor.run.window_spec import written as window_written
from advisor.sandbox.specs import CaptureSpec, ReadySpec, VerifySpec, read_spec, written

ROOT = Path(__file__).resolve().parent.parent


def _finding() -> Finding:
    return Finding(slug="zero-grad", code="ADV103", layer=Layer.APPLICATION, severity=Severity.LOW, title="t",
                   message="zero_grad() sets the gradients to zero instead of None")


def test_each_childs_spec_reads_back_as_the_record_its_kind_names(tmp_path):
    for spec in (CaptureSpec(model_file="/m.py", trace_path="/t.json.gz", wait_for_quiet_s=2.0),
                 VerifySpec(model_file="/m.py", budget_s=4.0, verify=[_finding()], rule_dirs=["/r"]),
                 VerifySpec(model_file="/m.py", budget_s=None, pairs=3, patched_model_file="/p.py"),  # --pairs
                 ReadySpec(model_file="/m.py", batch_sizes=[1, 8], precision="fp16", seconds_per_size=0.5)):
        written(spec, str(tmp_path / "spec.json"))
        back = read_spec(str(tmp_path / "spec.json"))
        assert type(back) is type(spec) and back == spec
    assert isinstance(back.batch_sizes, list) and back.precision == "fp16"


def test_a_spec_with_a_field_misspelt_or_missing_is_refused_naming_it(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"kind": "capture", "model_file": "/m.py", "trace_pth": "/t"}))
    with pytest.raises(ValueError, match="trace_pth"):
        read_spec(str(path))
    path.write_text(json.dumps({"kind": "verify", "model_file": "/m.py"}))
    with pytest.raises(ValueError, match="budget_s"):
        read_spec(str(path))
    path.write_text(json.dumps({"kind": "audit", "model_file": "/m.py"}))
    with pytest.raises(ValueError, match="unknown kind 'audit'"):
        read_spec(str(path))
    with pytest.raises(TypeError, match="trace_path"):
        CaptureSpec(model_file="/m.py")  # the parent cannot write it without one


def test_the_window_spec_carries_a_verification_runs_fixes_and_blocks_as_records(tmp_path):
    spec = WindowSpec(script="/train.py", out_dir=str(tmp_path), measure_only=True, kind="optimizer",
                      fixes=[_finding()], switched=BlocksSpec(block=4, most_pairs=20, exact=True))
    window_written(spec, str(tmp_path / "spec.json"))
    back = read_window_spec(str(tmp_path / "spec.json"))
    assert back == spec and isinstance(back.fixes[0], Finding) and back.switched.block == 4
    assert (back.warmup_steps, back.steps, back.profile_steps) == (3, 20, 3)  # declared once, in window_spec.py
    (tmp_path / "bad.json").write_text(json.dumps({"script": "/train.py", "warmup": 5}))
    with pytest.raises(ValueError, match="warmup"):
        read_window_spec(str(tmp_path / "bad.json"))


def test_a_verification_run_finds_the_module_the_step_calls_where_it_is_not_the_model_named():
    from advisor.evidence import TargetInfo
    from advisor.run.window_spec import AuditedModel

    named = TargetInfo(model_file="train.py", model_class="LitNet", param_count=120)
    assert AuditedModel.of(named) == AuditedModel(class_name="LitNet", params=120)
    parts = named.model_copy(update={"called_module": "Sequential", "called_params": 100})  # training_step calls a part
    assert AuditedModel.of(parts) == AuditedModel(class_name="Sequential", params=100)
    assert AuditedModel.of(TargetInfo(model_file="train.py")) is None  # no model read: none to find


def test_the_file_layer_spec_is_checked_without_pydantic(tmp_path):
    path = str(tmp_path / "files.json")
    FileLayerSpec(mode="shadow", journal="/j", shadow="/s", limit=10).write(path)
    assert FileLayerSpec.read(path).shadow == "/s"
    with pytest.raises(ValueError, match="mode 'shadow'"):
        FileLayerSpec(mode="shadow", journal="/j", limit=10).write(path)
    Path(path).write_text(json.dumps({"mode": "journal", "journal": "/j", "limt": 10}))
    with pytest.raises(TypeError, match="limit"):
        FileLayerSpec.read(path)


def test_no_code_reads_a_spec_as_a_dict():
    reads = [f"{path.relative_to(ROOT)}:{number}" for path in (ROOT / "advisor").rglob("*.py")
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bspec(\.get\(|\[)", line)]
    assert reads == []
