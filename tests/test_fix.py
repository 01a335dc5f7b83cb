"""``advisor fix`` on bundled samples, end to end: the patch is written and applies with git, the patched
copy is measured against the original and audited again, the user's file is only changed by --apply, and
then kept recoverable."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import SAMPLES


def _fix(folder, sample: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", "fix", f"{sample}.py", "--pairs", "3", *args],
                          cwd=folder, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_the_patch_is_re_audited_against_the_original_and_clears_its_finding(tmp_path):
    shutil.copy(SAMPLES / "anomaly_left_on.py", tmp_path)
    original = (tmp_path / "anomaly_left_on.py").read_text()
    done = _fix(tmp_path, "anomaly_left_on")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "anomaly_left_on.py").read_text() == original  # a patch, not an edit
    report = json.loads((tmp_path / "reports" / "anomaly_left_on.fix.json").read_text())
    [finding] = [f for f in report["findings"] if f["slug"] == "anomaly-detection"]
    edit = finding["edit"]
    assert edit["safe"] and edit["file"].endswith("anomaly_left_on.py")
    assert edit["lines"][0] == original.splitlines().index(
        "torch.autograd.set_detect_anomaly(True)  # left over from hunting a NaN") + 1
    assert edit["verification"]["samples"] == 3 and edit["verification"]["max_rel_error"] is not None
    patch = (tmp_path / "reports" / "anomaly_left_on.patch").read_text()
    assert patch == done.stdout
    # the gain is this machine's (anomaly mode costs little in this small CPU step)
    if _kept_unless_slower_on_a_quiet_machine(edit):
        assert "-torch.autograd.set_detect_anomaly(True)" in patch
        assert edit["cleared"] is True and "finding cleared" in done.stderr
        subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
        subprocess.run(["git", "apply", "--check", "reports/anomaly_left_on.patch"], cwd=tmp_path, check=True)
    assert "Source edit:" in (tmp_path / "reports" / "anomaly_left_on.fix.html").read_text()


@pytest.mark.slow
def test_a_fix_the_step_cannot_measure_is_checked_cleared_applied_when_asked_and_kept_recoverable(tmp_path):
    shutil.copy(SAMPLES / "zero_grad_in_place.py", tmp_path)
    done = _fix(tmp_path, "zero_grad_in_place")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "reports" / "zero_grad_in_place.fix.json").read_text())
    [edit] = [f["edit"] for f in report["findings"] if f["slug"] == "zero-grad"]
    assert edit["verification"]["status"] == "not-verifiable-here" and "training loop" in edit["verification"]["note"]
    assert edit["cleared"] is True and "+        optimizer.zero_grad()" in done.stdout

    original = (tmp_path / "zero_grad_in_place.py").read_text()
    saved = "reports/zero_grad_in_place.fix.json"  # its findings reused: no second audit
    applied = _fix(tmp_path, "zero_grad_in_place", "--from", saved, "--apply")
    assert applied.returncode == 0, applied.stderr
    assert (tmp_path / "zero_grad_in_place.py.advisor-orig").read_text() == original
    assert "optimizer.zero_grad(set_to_none=False)" not in (tmp_path / "zero_grad_in_place.py").read_text()
    patched = (tmp_path / "zero_grad_in_place.py").read_text()
    again = _fix(tmp_path, "zero_grad_in_place", "--from", saved, "--apply")  # the line changed since that audit
    assert again.returncode != 0 and "Traceback" not in again.stderr and "nothing to apply" in again.stderr
    assert (tmp_path / "zero_grad_in_place.py").read_text() == patched
    (tmp_path / "broken.py").write_text("def get_model(:\n")
    broken = _fix(tmp_path, "broken")
    assert broken.returncode == 2 and "the audit did not complete" in broken.stderr and "Traceback" not in broken.stderr
    (tmp_path / "bad.json").write_text("{not json")
    bad = _fix(tmp_path, "zero_grad_in_place", "--from", "bad.json")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "zero_grad_in_place.py" in bad.stderr


@pytest.mark.slow
def test_the_patched_file_and_the_original_each_run_with_the_flags_their_own_import_set(tmp_path):
    """Both files are imported into one measuring process: a flag the original sets at its top (threads,
    anomaly mode) and the patch removes must not carry over to the patched side, nor back."""
    import os

    import torch

    from advisor.verify.copies import Budget, process_flags, verify_patched
    from advisor.workload.target import load_target
    from conftest import write_model

    source = """
        import torch
        torch.set_num_threads(1)  # FLAG
        torch.autograd.set_detect_anomaly(True)  # FLAG
        SEEN = []

        class Probe(torch.nn.Linear):
            def forward(self, x):
                SEEN.append((torch.get_num_threads(), torch.is_anomaly_enabled()))
                return super().forward(x)

        def get_model():
            torch.manual_seed(0)
            return Probe(4, 4)

        def get_inputs():
            return torch.ones(2, 4)
    """
    before = process_flags()
    threads = max(2, torch.get_num_threads())
    torch.set_num_threads(threads)
    pristine = process_flags()
    try:
        os.makedirs(tmp_path / "original")
        original = load_target(str(write_model(tmp_path / "original", source)), "inference", "cpu")
        patched_text = "\n".join(line for line in (tmp_path / "original" / "model.py").read_text().splitlines()
                                 if "# FLAG" not in line)
        os.makedirs(tmp_path / "patched")
        (tmp_path / "patched" / "model.py").write_text(patched_text)
        verdict = verify_patched(original, str(tmp_path / "patched" / "model.py"), 1e-6, Budget(0), lambda text: None,
                                 pairs=2, flags_before=pristine)
        patched_module = next(m for m in __import__("sys").modules.values()
                              if (getattr(m, "__file__", "") or "").startswith(str(tmp_path / "patched")))
        assert verdict.samples == 2, verdict
        assert set(original.module.SEEN) == {(1, True)}
        assert set(patched_module.SEEN) == {(threads, False)}
        assert (torch.get_num_threads(), torch.is_anomaly_enabled()) == (1, True)  # the original's, as it left them
    finally:
        from advisor.verify.copies import restore_flags

        restore_flags(before)


@pytest.mark.slow
@pytest.mark.xdist_group("train_loop")  # it writes /tmp/train_loop_checkpoint.pt: one run of it at a time
def test_a_scripts_patch_is_re_run_under_advisor_run_beside_the_original(tmp_path):
    shutil.copy(SAMPLES / "scripts" / "train_loop.py", tmp_path)
    original = (tmp_path / "train_loop.py").read_text()
    done = subprocess.run([sys.executable, "-m", "advisor", "fix", "--pairs", "2", "--", sys.executable, "train_loop.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "train_loop.py").read_text() == original
    report = json.loads((tmp_path / "reports" / "train_loop.fix.json").read_text())
    edits = {f["slug"]: f["edit"] for f in report["findings"] if f["edit"]}
    zero_grad_held = _kept_unless_slower_on_a_quiet_machine(edits["zero-grad"])
    assert ("+            optimizer.zero_grad()  # ZERO GRAD LINE" in done.stdout) == zero_grad_held
    # the checkpoint's background writer changes when the file appears: offered only with --unsafe-fixes
    unsafe = edits.pop("checkpoint-in-step")
    assert unsafe["status"] == "unsafe" and unsafe["verification"] is None and not unsafe["diff"], unsafe
    patch = (tmp_path / "reports" / "train_loop.patch").read_text().splitlines()
    assert not [line for line in patch if line[:1] in "+-" and "torch.save" in line], patch
    advice = {slug: edit for slug, edit in edits.items() if edit["status"] == "not patched"}
    assert all(edit["reason"] for edit in advice.values()), advice  # each says why (advice only, no place, ...)
    for edit in (edit for slug, edit in edits.items() if slug not in advice):
        # runs of the patched copy alternating with the original's; the gain is this machine's
        assert edit["verification"]["samples"] == 2 and edit["verification"]["timed"] in ("run", "run with data"), edit
        assert edit["cleared"] is not None or edit["status"] == "dropped", edit  # the patched copy audited again
        if edit["status"] == "dropped" and edit["cleared"] is False:  # neither cleared nor verified: not handed over
            assert "the re-audit of the patched source still finds it" in edit["reason"], edit
            assert edit["verification"]["status"] != "verified", edit
    if zero_grad_held:
        assert edits["zero-grad"]["cleared"] is True  # a call in the source: gone, on any machine
    # the loader's data wait is a share of this machine's iteration (on a busy machine it moves either way):
    # where it fired, its edit sets the loader's keywords, is timed with the data wait, and is in the patch
    # unless the re-audit still found the wait and no gain was verified (or it measured slower)
    if "dataloader-workers" in edits:
        loader = edits["dataloader-workers"]
        assert loader["verification"]["timed"] == "run with data"
        in_patch = "num_workers=" in done.stdout and "persistent_workers=True" in done.stdout
        assert in_patch == (loader["status"] == "patched"), loader
    else:
        [run] = [r for r in report["rules"] if r["slug"] == "dataloader-workers"]
        assert run["status"] == "silent" and run["margin"] is not None, run
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", "--check", "reports/train_loop.patch"], cwd=tmp_path, check=True)


def _kept_unless_slower_on_a_quiet_machine(edit: dict) -> bool:
    """Whether the edit is in the patch: it is unless its patched source measured slower while the machine was
    quiet (a loss measured under contention may be the machine's, and keeps it, saying so)."""
    if edit["status"] == "patched":
        if edit["verification"]["status"] == "slower":
            assert "under contention" in edit["reason"], edit
        return True
    assert edit["status"] == "dropped" and edit["verification"]["status"] == "slower", edit
    assert edit["reason"].startswith("the patched source measured slower"), edit
    return False


def _conditions(others_cores: float):
    from advisor.machine.state import MeasurementConditions

    return MeasurementConditions(wall_s=10.0, cores_usable=2, others_cores=others_cores, steal_share=0.0)


@pytest.mark.parametrize("status, others_cores, kept", [
    ("slower", 0.0, False), ("slower", 1.0, True), ("verified", 1.0, True), ("numerics-failed", 1.0, False),
    ("inconclusive", 0.0, True)])
def test_an_edit_measured_slower_is_dropped_unless_the_machine_was_contended(status, others_cores, kept):
    from advisor.commands.fix import _hold_or_drop
    from advisor.rulekit.rule import Finding, SourceEdit, Verification

    edit = SourceEdit(status="patched")
    measured = Verification(status=status, speedup=0.6, ci_low=0.46, ci_high=0.79, samples=2,
                            conditions=_conditions(others_cores))
    _hold_or_drop(edit, Finding(slug="zero-grad", message="m"), measured)
    assert edit.verification is measured
    assert (edit.status == "patched") == kept, edit
    if status == "slower":
        assert ("under contention (other processes used 1.00 of this process's 2 CPUs" in edit.reason) == kept


def test_a_no_gain_against_an_audits_verified_fix_is_dropped_only_on_a_quiet_machine():
    from advisor.commands.fix import _hold_or_drop
    from advisor.rulekit.rule import Finding, SourceEdit, Verification

    audited = Finding(slug="zero-grad", message="m",
                      verification=Verification(status="verified", speedup=1.3, ci_low=1.2, ci_high=1.4))
    for others_cores, kept in ((0.0, False), (1.0, True)):
        edit = SourceEdit(status="patched")
        _hold_or_drop(edit, audited, Verification(status="no-gain", speedup=1.0, ci_low=0.98, ci_high=1.02,
                                                  conditions=_conditions(others_cores)))
        assert (edit.status == "patched") == kept, edit


def test_a_dropped_edit_says_once_why_its_patched_source_did_not_run():
    from advisor.commands.fix import _why_dropped
    from advisor.rulekit.rule import Verification

    reason = _why_dropped(Verification(status="fix-failed", note="the patched copy raised NameError: name 'F'"))
    assert reason == "the patched source did not run: the patched copy raised NameError: name 'F'"
    assert _why_dropped(Verification(status="numerics-failed", note="max error 0.3")).startswith(
        "the patched source changes the results")
