"""The CI recipe of the README (examples/ci_gate.sh), run as a CI job would: the gate holds on unchanged code,
catches a step made much slower, and says which file it could not audit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, SAMPLES

pytestmark = pytest.mark.slow
GATE = ROOT / "examples" / "ci_gate.sh"
SAMPLE = SAMPLES / "gpt_block.py"


def _gate(baseline, pr, out) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
                   "ADVISOR_GATE_PAIRS": "8"}  # the recipe's knob: fewer pairs than its 20 still time 4x the work
    assert shutil.which("advisor", path=environment["PATH"]), "advisor is not installed beside this Python"
    return subprocess.run(["sh", str(GATE), str(baseline), str(pr), str(out)], capture_output=True, text=True,
                          env=environment, timeout=600)


def _copy(tmp_path, folder: str, batch: str = "(8, 128)"):
    (tmp_path / folder).mkdir()
    copy = tmp_path / folder / "gpt_block.py"
    copy.write_text(SAMPLE.read_text(encoding="utf-8").replace("(8, 128)", batch), encoding="utf-8")
    return copy


def test_the_gate_passes_unchanged_code_and_catches_a_step_four_times_the_work(tmp_path):
    """Findings by the reports' diff (its step time shown, not judged); the step by the two files timed against
    each other, interleaved: a slower runner slows both alike."""
    unchanged = _gate(SAMPLE, _copy(tmp_path, "pr"), tmp_path / "same")
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert "not judged here (--no-step-time" in unchanged.stdout and (tmp_path / "same" / "diff.html").is_file()
    assert "added: 0" in unchanged.stdout and "resolved: 0" in unchanged.stdout
    assert "remeasured step time:" in unchanged.stdout and "REGRESSION" not in unchanged.stdout
    comment = (tmp_path / "same" / "comment.md").read_text(encoding="utf-8")  # what the workflow example posts
    assert "### Added: 0" in comment and "remeasured step time:" in comment.split("timed against each other")[-1]
    assert list((tmp_path / "same" / "pr").glob("*.sarif"))  # what it uploads to code scanning
    slower = _gate(SAMPLE, _copy(tmp_path, "big", "(32, 128)"), tmp_path / "big-out")
    assert slower.returncode == 1 and "REGRESSION" in slower.stdout, slower.stdout + slower.stderr


def test_the_gate_exits_2_naming_a_file_it_could_not_audit(tmp_path):
    missing = tmp_path / "gone.py"
    result = _gate(missing, SAMPLE, tmp_path / "out")
    assert result.returncode == 2 and str(missing) in result.stderr


def _advisor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, timeout=600)


def test_remeasure_times_two_model_files_interleaved_and_calls_four_times_the_work_a_regression(tmp_path):
    slower = _advisor("diff", "--remeasure", str(SAMPLE), str(_copy(tmp_path, "big", "(32, 128)")), "--pairs", "6")
    assert slower.returncode == 1 and "REGRESSION" in slower.stdout, slower.stdout + slower.stderr
    assert "interleaved pairs in one fresh process" in slower.stdout and "outputs not" in slower.stdout


def test_remeasure_refuses_a_script_against_a_model_file_naming_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('training')\n", encoding="utf-8")
    refused = _advisor("diff", "--remeasure", str(SAMPLE), str(script))
    assert refused.returncode == 2 and f"{script}: not a model file" in refused.stderr and "Traceback" not in refused.stderr


def test_remeasure_times_two_scripts_in_alternating_whole_runs_with_their_arguments(tmp_path):
    # a script that trains only when given its argument: both revisions must run with the ARGS after --
    original = (SAMPLES / "scripts" / "clean_train.py").read_text(encoding="utf-8")
    needs_argument = original.replace('if __name__ == "__main__":\n',
                                      'if __name__ == "__main__":\n    import sys\n    assert sys.argv[1:] == ["--go"]\n')
    assert needs_argument != original
    old, new = tmp_path / "old_train.py", tmp_path / "new_train.py"
    for script in (old, new):
        script.write_text(needs_argument, encoding="utf-8")
    measured = _advisor("diff", "--remeasure", str(old), str(new), "--pairs", "2", "--", "--go")
    # measured (0 or 1: two runs per side on a loaded machine decide nothing about noise), never "not measured" (2)
    assert measured.returncode in (0, 1), measured.stdout + measured.stderr
    assert "2 interleaved pairs of whole runs" in measured.stdout and "timing only" in measured.stdout


def test_remeasure_refuses_arguments_for_model_files_and_arguments_without_it():
    with_arguments = _advisor("diff", "--remeasure", str(SAMPLE), str(SAMPLE), "--", "--go")
    assert with_arguments.returncode == 2 and "a model file takes no arguments (--go)" in with_arguments.stderr
    stray = _advisor("diff", "old.json", "new.json", "--", "--go")
    assert stray.returncode == 2 and "--go: arguments are for two scripts' --remeasure" in stray.stderr
