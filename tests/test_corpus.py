"""Real public scripts from ../shared/corpus, unmodified, run under advisor as their RUN.md says: the step advisor
reads is the script's own iteration, and its report blames neither a quiet machine nor a library's line. Each case
skips cleanly where the corpus (or a package it needs) is absent; bench/corpus.py runs all of them by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from advisor.report.schema import Report
from advisor.sources import is_library_path
from conftest import ROOT

CORPUS = ROOT.parent / "shared" / "corpus"
pytestmark = pytest.mark.slow


def _case(name: str, tmp_path: Path) -> Path:
    folder = CORPUS / name
    if not (folder / "RUN.md").exists():
        pytest.skip(f"the corpus case {name} is not present (../shared/corpus)")
    work = tmp_path / "work"
    subprocess.run([sys.executable, str(folder / "prepare.py"), str(work)], check=True, capture_output=True)
    return folder


def _run(script: Path, work: Path, *args: str) -> Report:
    """``advisor run`` from the case's scratch folder, as RUN.md says (the scripts read their data from there)."""
    done = subprocess.run([sys.executable, "-m", "advisor", "run", "--no-verify", "--out", "reports", "--",
                           sys.executable, str(script), *args], cwd=work, capture_output=True, text=True, timeout=900)
    report = work / "reports" / f"{script.stem}.json"
    assert report.exists(), done.stderr[-2000:]
    return Report.model_validate_json(report.read_text(encoding="utf-8"))


def _healthy(report) -> None:
    assert report.quality.state != "contended" or report.quality.timing.others_cores, report.quality.summary
    for finding in report.findings:
        if finding.severity.rank > 1:  # above LOW: at the user's lines
            assert not any(is_library_path(loc.file) for loc in finding.locations if loc.file), finding


def test_a_regression_fitted_by_hand_steps_at_each_backward(tmp_path):
    folder = _case("pytorch-examples-regression", tmp_path)
    report = _run(folder / "upstream" / "regression" / "main.py", tmp_path / "work")
    step = report.target.step
    assert report.errors == [] and report.target.mode == "train" and report.target.model_class == "Linear"
    assert step.recognised_by.startswith("each backward") and step.counts["updated_by_hand"] == 2
    assert step.counts["forwards"] == {"Linear": 1} and step.counts["zero_grads"] == 1
    _healthy(report)


def test_a_graph_network_evaluating_every_epoch_is_timed_on_its_training_part(tmp_path):
    pytest.importorskip("requests")  # imported at the script's top
    folder = _case("pytorch-examples-gat", tmp_path)
    report = _run(folder / "upstream" / "gat" / "main.py", tmp_path / "work", "--epochs", "9", "--num-heads", "1",
                  "--val-every", "5")
    step = report.target.step
    assert report.errors == [] and report.target.model_class == "GAT"
    assert step.counts["forwards"] == {"GAT": 1} and step.counts["optimizer_steps"] == {"Adam": 1}
    assert report.timing is not None and len(report.timing.samples_ms) >= 5  # each epoch evaluates; none was lost
    _healthy(report)
