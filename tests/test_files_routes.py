"""Every way Python code writes, in real processes: for real (and journaled) in the audited run; into a
shadow in an experiment, which starts from the files as the audited run found them and changes none."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.files.session import FileSession
from advisor.run.launch import ADVISOR_ROOT
from advisor.sandbox.child import BOOT_DIR
from conftest import file_states

WRITES = Path(__file__).parent / "writes_everywhere.py"
pytestmark = pytest.mark.slow


def _user_folder(root: Path) -> Path:
    work = root / "work"
    (work / "old").mkdir(parents=True)
    (work / "old" / "keep.txt").write_text("k")
    (work / "counter.txt").write_text("0")
    (work / "log.txt").write_text("start\n")
    (work / "data.bin").write_bytes(b"abc")
    return work


def _run(work: Path, environment: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **environment,
           "PYTHONPATH": os.pathsep.join([BOOT_DIR, ADVISOR_ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(WRITES), str(work)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "done" in done.stdout, done.stdout + done.stderr
    return done


@pytest.fixture
def session():
    files = FileSession.start()
    yield files
    files.close()


def test_the_audited_run_writes_for_real_and_each_experiment_starts_from_where_it_started(tmp_path, session):
    work = _user_folder(tmp_path)
    audited = _run(work, session.journal_environment())
    assert "found counter 0" in audited.stdout and (work / "counter.txt").read_text() == "1"
    assert (work / "state.pt").exists() and not (work / "old").exists()  # real: the user's own run
    after_audit = file_states(work)
    session.remember()
    for _ in range(2):  # each experiment finds the files as the audited run did, and leaves them as they are
        environment, arm = session.shadow_environment()
        experiment = _run(work, environment)
        assert "found counter 0" in experiment.stdout and "database rows [0]" in experiment.stdout
        assert f"tempdir {os.path.join(arm, 'tmp')}" in experiment.stdout  # tempfile: the run's own scratch
        session.finish_run(arm, "experiment", 1.0, 0, experiment.stdout)
        assert file_states(work) == after_audit
    record = session.record("ran to its own end")
    changes = {change.path: change.change for change in record.written}
    work_path = os.path.realpath(work)
    assert changes[f"{work_path}/counter.txt"] == "modified" and changes[f"{work_path}/old"] == "deleted"
    assert changes[f"{work_path}/state.pt"] == "created" and changes[f"{work_path}/results.db"] == "created"
    assert f"{work_path}/fresh.txt" not in changes and record.temporary >= 1  # created and removed again
    assert record.changed == [] and record.checked >= len(changes)
    assert all(run.shadow_files > 10 for run in record.experiment_runs) and record.not_kept == []


def test_an_experiment_over_no_journal_changes_nothing(tmp_path, session):
    work = _user_folder(tmp_path)
    before = file_states(work)
    environment, arm = session.shadow_environment()
    _run(work, environment)
    session.finish_run(arm, "experiment", 1.0, 0, "")
    assert file_states(work) == before


def test_an_experiment_whose_layer_cannot_install_does_not_run(tmp_path, session):
    work = _user_folder(tmp_path)
    before = file_states(work)
    environment, _ = session.shadow_environment()
    environment["ADVISOR_FILES"] = str(tmp_path / "missing.json")
    env = {**os.environ, **environment, "PYTHONPATH": os.pathsep.join([BOOT_DIR, ADVISOR_ROOT])}
    done = subprocess.run([sys.executable, str(WRITES), str(work)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 70 and "file layer could not be installed" in done.stderr
    assert file_states(work) == before


DELETES_ITS_FOLDER = """
import os, shutil, subprocess, sys
shutil.rmtree(os.getcwd())  # an experiment that deletes its own working folder
assert not os.path.exists("counter.txt")
subprocess.run(["true"])  # a program the shadow cannot follow: named in the report
print("done", flush=True)
"""


def test_an_experiment_that_deletes_its_working_folder_changes_nothing_and_a_program_it_starts_is_named(
        tmp_path, session):
    work = _user_folder(tmp_path)
    before = file_states(work)
    environment, arm = session.shadow_environment()
    env = {**os.environ, **environment, "PYTHONPATH": os.pathsep.join([BOOT_DIR, ADVISOR_ROOT])}
    done = subprocess.run([sys.executable, "-c", DELETES_ITS_FOLDER], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    session.finish_run(arm, "experiment", 1.0, 0, done.stdout)
    assert file_states(work) == before
    assert any("started true, which advisor's file layer does not reach" in line for line in session.unrouted)


def test_the_programs_a_run_starts_are_one_line_each_however_often_it_starts_them():
    from advisor.files.session import _grouped, _unrouted

    started = [{"op": "subprocess", "argv": ["g++", f"/tmp/kernel{n}.cpp"], "child": 100 + n} for n in range(12)]
    started.append({"op": "subprocess", "argv": ["openssl", "sha512", "header.i"], "child": 200})
    lines = _grouped([d for event in started if (d := _unrouted(event, set(), "an experiment run"))])
    assert len(lines) == 2, lines
    assert lines[0].startswith("an experiment run started g++ /tmp/kernel0.cpp,") and "(g++: 12 times in all)" in lines[0]
    assert "openssl sha512 header.i" in lines[1] and "times in all" not in lines[1]
