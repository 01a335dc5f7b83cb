"""The training frameworks' callbacks: a real tiny Hugging Face Trainer run and a Lightning fit on CPU, each with
advisor's callback added, train to their end and leave the report of a window of their own steps, the fixes that
can be switched measured in their later steps. Skipped where the framework is not installed (neither is advisor's
dependency); a plain loop with the same in-process audit runs everywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FITS = Path(__file__).parent / "data" / "integrations"
pytestmark = pytest.mark.slow


def _fit(script: str, tmp_path: Path) -> tuple[str, dict]:
    done = subprocess.run([sys.executable, str(FITS / script), str(tmp_path)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (report,) = (tmp_path / "reports").glob("*.json")
    return done.stdout, json.loads(report.read_text())


def _read_as_advisor_run_reads_it(report: dict, model_class: str, optimizer: str) -> None:
    target = report["target"]
    assert target["model_class"] == model_class and target["mode"] == "train"
    assert f"1 step of {optimizer}" in target["step"]["summary"] and report["errors"] == []
    assert len(report["timing"]["samples_ms"]) == 10 and report["trace"] is not None  # the steps=10 asked for
    assert report["verification"]["enabled"] is True and "switched on and off by blocks" in report["verification"]["note"]
    for finding in report["findings"]:  # each fix measured in the training, or said why not (never left unsaid)
        assert finding["verification"] is not None, finding["slug"]


def test_the_hugging_face_trainer_callback_audits_a_window_of_its_steps_and_training_goes_on(tmp_path):
    pytest.importorskip("transformers", reason="transformers is not installed here")
    stdout, report = _fit("hf_trainer_fit.py", tmp_path)
    assert "TRAINED 40" in stdout  # every step the Trainer was asked for ran
    _read_as_advisor_run_reads_it(report, "BertForSequenceClassification", "AdamW")
    # the Trainer checks each step's loss for nan/inf as Python bools (2 syncs a step beneath trainer.train()): the
    # fix is its setting, not an edit of its loop (with the setting off the sync is gone: checked by hand)
    assert "host-sync" in {finding["slug"] for finding in report["findings"]}
    for finding in report["findings"]:
        assert "torch.where" not in finding["fix"]["summary"], finding["fix"]
        if finding["slug"] == "host-sync":
            assert "TrainingArguments(logging_nan_inf_filter=False)" in finding["fix"]["summary"]
            assert finding["evidence"]["advice_without_framework"]


def test_the_lightning_callback_audits_a_window_of_its_steps_and_the_fit_goes_on(tmp_path):
    pytest.importorskip("lightning", reason="lightning is not installed here")
    stdout, report = _fit("lightning_fit.py", tmp_path)
    assert "TRAINED 60" in stdout
    _read_as_advisor_run_reads_it(report, "Net", "AdamW")


def _measured_in_training(verification: dict) -> None:
    """A fix switched on and off by blocks of the training's own steps: a verdict from pairs of blocks."""
    assert verification["timed"] == "block" and verification["samples"] >= 6, verification
    assert verification["status"] in ("verified", "no-gain", "slower", "inconclusive")
    assert "switched inside the user's own training" in verification["note"]


def test_the_lightning_callback_measures_a_switchable_fix_in_the_fits_own_steps_and_takes_it_back(tmp_path):
    """torch.compile, advised as Lightning users do it, switched into the fit's forward block by block after the
    window; the fit reaches its last step and ends with its own model and optimizer."""
    pytest.importorskip("lightning", reason="lightning is not installed here")
    stdout, report = _fit("lightning_verify_fit.py", tmp_path)
    assert "TRAINED 3000 FOREACH False OWN FORWARD False" in stdout
    [storm] = [f for f in report["findings"] if f["slug"] == "kernel-storm"]
    assert storm["fix"]["summary"].startswith("compile the module before fitting")
    _measured_in_training(storm["verification"])


def test_a_plain_loop_audited_in_its_process_gets_its_optimizers_fix_measured_in_its_own_steps(tmp_path):
    """What the callbacks install, without a framework: the optimizer's foreach/fused switched in the loop's own
    later steps, its numerics compared at the first such step; the loop ends with its own options. Its step calls
    a part of the model (net.body), whose forward the compile fix is switched into."""
    stdout, report = _fit("plain_loop_fit.py", tmp_path)
    assert "FOREACH False FUSED None OWN FORWARD False" in stdout
    [optimizer] = [f for f in report["findings"] if f["slug"] == "optimizer-foreach"]
    _measured_in_training(optimizer["verification"])
    assert "the parameters after one optimizer step from the same state match" in optimizer["verification"]["note"]
    # the loop calls the model's part: the fixes of the forward find that part (the model named is the class)
    assert (report["target"]["model_class"], report["target"]["called_module"]) == ("Net", "Sequential")
    storms = [f for f in report["findings"] if f["slug"] == "kernel-storm"]  # dispatch 31% against 15% here
    assert storms or report["quality"]["state"] == "contended"  # a share: another job's load may move it
    for storm in storms:
        assert storm["verification"]["status"] != "fix-failed" and "never called" not in storm["verification"]["note"]
