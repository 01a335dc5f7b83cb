"""``advisor fix``'s edits, in the TorchFix manner: each folder tests/data/patches/<rule>/<case>/ holds an
``input.py``, the finding (``finding.json``: its evidence, and ``"unsafe": true`` for an edit that waits
for --unsafe-fixes; its location is the line marked ``# FINDING``), and the file the rule's patch must
make of it (``expected.py``) or the reason it must refuse (``refused.txt``). Cases are collected from the
folders: a new codemod's fixtures are its tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from advisor.patch.patch_plan import NO_PATCH, plan_patch
from advisor.rulekit.engine import load_rules
from advisor.rulekit.rule import Finding, Location, Severity

PATCHES = Path(__file__).parent / "data" / "patches"
CASES = sorted(p.parent for p in PATCHES.glob("*/*/input.py"))


def _finding(case: Path, model: Path) -> Finding:
    spec = json.loads((case / "finding.json").read_text())
    locations = []
    if spec.get("locations", True):
        lines = [n for n, text in enumerate(model.read_text().splitlines(), 1) if "# FINDING" in text]
        locations = [Location(file=str(model), line=n, note=spec.get("note", ""), function=spec.get("function", ""))
                     for n in lines]
    return Finding(id=f"{case.parent.name}@{case.name}", slug=case.parent.name, message="a fixture",
                   severity=Severity.MEDIUM, evidence=spec["evidence"], locations=locations)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_a_rules_patch_makes_the_expected_file_or_refuses_with_its_reason(case, tmp_path):
    model = tmp_path / "model.py"
    shutil.copy(case / "input.py", model)
    finding = _finding(case, model)
    unsafe = json.loads((case / "finding.json").read_text()).get("unsafe", False)
    if unsafe:  # an edit that changes results by design waits for --unsafe-fixes
        assert plan_patch([finding], load_rules(), entry=str(model), root=str(tmp_path)).edits[finding.id].status == "unsafe"
    plan = plan_patch([finding], load_rules(), entry=str(model), root=str(tmp_path), unsafe=unsafe)
    edit = plan.edits[finding.id]
    assert edit.safe is not unsafe
    if (case / "refused.txt").exists():
        assert edit.status == "not patched" and (case / "refused.txt").read_text().strip() in edit.reason, edit
        assert plan.texts() == {}
    else:
        assert edit.status == "patched", edit
        assert plan.texts()[str(model)] == (case / "expected.py").read_text()
        assert edit.diff.startswith("--- a/model.py\n+++ b/model.py\n")
    assert model.read_text() == (case / "input.py").read_text()  # planning writes nothing


def test_every_rule_with_a_source_patch_has_fixture_cases():
    patched = {rule.slug for rule in load_rules().rules if rule.patch_spec is not None}
    assert patched and patched == {case.parent.name for case in CASES}


def _loader_finding(slug: str, path: Path, line: int, **evidence) -> Finding:
    return Finding(id=f"{slug}@{line}", slug=slug, message="a fixture", severity=Severity.MEDIUM, evidence=evidence,
                   locations=[Location(file=str(path), line=line, function="DataLoader",
                                       note="the DataLoader(...) call: its settings change here")])


def test_edits_of_one_call_merge_and_edits_of_one_keyword_do_not(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("from torch.utils.data import DataLoader\nloader = DataLoader(range(8), batch_size=2)\n")
    workers = _loader_finding("dataloader-workers", model, 2, workers_suggested=1)
    pinned = _loader_finding("dataloader-pin-memory", model, 2)
    fewer = _loader_finding("dataloader-too-many-workers", model, 2, suggested_workers=3)
    plan = plan_patch([workers, pinned, fewer], load_rules(), entry=str(model), root=str(tmp_path))
    assert plan.texts()[str(model)].splitlines()[1] == (
        "loader = DataLoader(range(8), batch_size=2, num_workers=1, persistent_workers=True, pin_memory=True)")
    assert plan.edits[fewer.id].status == "not patched" and "overlaps another edit" in plan.edits[fewer.id].reason


def test_a_file_that_does_not_parse_or_lies_in_a_library_is_never_edited(tmp_path):
    import torch.utils.data

    broken = tmp_path / "model.py"
    broken.write_text("from torch.utils.data import DataLoader\nloader = DataLoader(range(8), batch_size=2\n")
    in_library = Path(torch.utils.data.__file__).parent / "dataloader.py"
    bad = _loader_finding("dataloader-workers", broken, 2, workers_suggested=1)
    library = _loader_finding("dataloader-pin-memory", in_library, 10)
    before = in_library.read_bytes()
    plan = plan_patch([bad, library], load_rules(), entry=str(broken), root=str(tmp_path))
    assert plan.edits[bad.id].status == "not patched" and "does not parse" in plan.edits[bad.id].reason
    assert plan.edits[library.id].status == "not patched" and "library" in plan.edits[library.id].reason
    assert plan.texts() == {} and plan.diff() == "" and in_library.read_bytes() == before


def test_an_edit_outside_the_entrys_folder_is_refused_as_the_re_audit_could_not_check_it(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "job").mkdir()
    helper = tmp_path / "shared" / "loaders.py"
    helper.write_text("from torch.utils.data import DataLoader\nloader = DataLoader(range(8), batch_size=2)\n")
    entry = tmp_path / "job" / "train.py"
    entry.write_text("from shared.loaders import loader\n")
    outside = _loader_finding("dataloader-workers", helper, 2, workers_suggested=1)
    plan = plan_patch([outside], load_rules(), entry=str(entry), root=str(tmp_path))
    assert plan.edits[outside.id].status == "not patched", plan.edits[outside.id]
    assert "outside" in plan.edits[outside.id].reason and plan.texts() == {}
    inside = plan_patch([outside], load_rules(), entry=str(tmp_path / "train.py"), root=str(tmp_path))
    assert inside.edits[outside.id].status == "patched"  # from the folder above, the helper is in the copy


def test_an_unsafe_edit_waits_for_unsafe_fixes_and_a_rule_without_a_source_form_says_so(tmp_path):
    from advisor.rulekit.rule import PatchSpec

    model = tmp_path / "model.py"
    model.write_text("import torch\ntorch.autograd.set_detect_anomaly(True)\n")
    rules = load_rules()
    anomaly = Finding(id="a", slug="anomaly-detection", message="m", severity=Severity.HIGH)
    rule = rules.get("anomaly-detection")
    safe_spec = rule.patch_spec
    try:
        rule.patch_spec = PatchSpec(apply=safe_spec.apply, safe=False, what=safe_spec.what)
        assert plan_patch([anomaly], rules, entry=str(model), root=str(tmp_path)).edits["a"].status == "unsafe"
        made = plan_patch([anomaly], rules, entry=str(model), root=str(tmp_path), unsafe=True)
        assert made.edits["a"].status == "patched" and made.texts()[str(model)] == "import torch\n"
    finally:
        rule.patch_spec = safe_spec
    no_form = Finding(id="b", slug="host-sync", message="m", severity=Severity.HIGH)
    [edit] = plan_patch([no_form], rules, entry=str(model), root=str(tmp_path)).edits.values()
    assert edit.status == "not patched" and edit.reason == NO_PATCH


def test_an_edit_this_device_would_run_slower_is_never_offered_and_no_empty_patch_is_written(tmp_path, capsys):
    """missing-amp on a CPU that emulates bf16: autocast would be slower here, so not even --unsafe-fixes makes it."""
    from advisor.evidence import TargetInfo
    from advisor.patch.summary import print_patch, write_patch
    from advisor.report.schema import Report

    model = tmp_path / "model.py"
    model.write_text("import torch\ndef get_model():\n    return torch.nn.Linear(4, 4)\n")
    slower = Finding(id="c", slug="missing-amp", message="m", severity=Severity.INFO,
                     evidence={"slower_on_this_device": True}, locations=[Location(file=str(model), line=3)])
    for unsafe in (False, True):
        plan = plan_patch([slower], load_rules(), entry=str(model), root=str(tmp_path), unsafe=unsafe)
        assert plan.edits["c"].status == "not patched" and "slower" in plan.edits["c"].reason and plan.diff() == ""
    slower.edit = plan.edits["c"]
    report = Report(target=TargetInfo(model_file=str(model)), findings=[slower])
    written = write_patch(report, "", str(tmp_path / "out"), "model")
    assert "patch" not in written and not (tmp_path / "out" / "model.patch").exists()
    print_patch(report, "", written)
    said = capsys.readouterr().err
    assert "missing-amp: not patched" in said and "no edit was made, so no patch was written" in said


def test_a_line_changed_since_the_audit_is_not_edited(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("def step(optimizer):\n    optimizer.zero_grad(set_to_none=False)\n")
    finding = Finding(id="z", slug="zero-grad", message="m", severity=Severity.LOW, evidence={},
                      locations=[Location(file=str(model), line=2, code="optimizer.zero_grad(set_to_none=False)")])
    assert plan_patch([finding], load_rules(), entry=str(model), root=str(tmp_path)).edits["z"].status == "patched"
    model.write_text("def step(optimizer):\n    print('moved')\n    optimizer.zero_grad(set_to_none=False)\n")
    edit = plan_patch([finding], load_rules(), entry=str(model), root=str(tmp_path)).edits["z"]
    assert edit.status == "not patched" and "changed since the audit" in edit.reason


def test_a_ddp_jobs_three_findings_become_one_patch_of_its_script():
    """rank 0's saved evidence of ``advisor run -- torchrun ... ddp_train.py``: the two DDP keyword edits of
    one constructor merge, and the micro-step loop runs under no_sync but on its last iteration."""
    from advisor.rulekit.engine import run_rules
    from devkit.saved_evidence import DDP_DIR, saved_evidence

    rules = load_rules()
    evidence = saved_evidence("ddp_train", DDP_DIR)
    findings, _ = run_rules(rules, evidence)
    plan = plan_patch(findings, rules, entry=evidence.target.model_file, root=str(PATCHES.parents[2]))
    statuses = {f.slug: plan.edits[f.id].status for f in findings if f.id in plan.edits}
    assert statuses == {"no-sync-accumulation": "patched", "find-unused-parameters": "patched",
                        "ddp-buckets": "patched", "comm-overlap": "not patched"}, statuses  # comm-overlap: advice
    [text] = plan.texts().values()
    compile(text, evidence.target.model_file, "exec")
    assert "find_unused_parameters=False" in text and "gradient_as_bucket_view=True" in text
    assert "with (contextlib.nullcontext() if _micro == args.accumulate - 1 else model.no_sync()):" in text
    assert plan.diff().startswith("--- a/samples/scripts/ddp_train.py\n")


def test_apply_refuses_a_file_changed_since_it_was_read_or_an_old_backup_and_writes_nothing(tmp_path):
    from advisor.patch.apply import BACKUP_SUFFIX, ApplyRefused, apply_patch

    model = tmp_path / "model.py"
    model.write_text("def step(optimizer):\n    optimizer.zero_grad(set_to_none=False)  # keep this comment\n")
    finding = Finding(id="z", slug="zero-grad", message="m", severity=Severity.LOW, evidence={},
                      locations=[Location(file=str(model), line=2)])
    plan = plan_patch([finding], load_rules(), entry=str(model), root=str(tmp_path))
    (tmp_path / ("model.py" + BACKUP_SUFFIX)).write_text("an earlier backup")
    with pytest.raises(ApplyRefused, match="exists already"):
        apply_patch(plan)
    (tmp_path / ("model.py" + BACKUP_SUFFIX)).unlink()
    model.write_text(model.read_text() + "# edited meanwhile\n")
    with pytest.raises(ApplyRefused, match="changed since the audit read it"):
        apply_patch(plan)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.py"]  # nothing written, no backup left
    model.write_text(plan.sources[str(model)].text)
    assert apply_patch(plan) == [str(model)]
    assert model.read_text() == "def step(optimizer):\n    optimizer.zero_grad()  # keep this comment\n"
    assert (tmp_path / ("model.py" + BACKUP_SUFFIX)).read_text() == plan.sources[str(model)].text
