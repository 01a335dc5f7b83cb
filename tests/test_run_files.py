"""advisor never changes the user's files: the audited run's writes are its own, every experiment writes
into a shadow and starts from the same files, and a run advisor stops is stopped between two steps,
never in the middle of a write."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from advisor.commands.audit import AuditOptions, run_audit
from advisor.commands.run import RunOptions, run_script
from conftest import SAMPLES, line_of, read_only_folder, write_model

RESUMING = SAMPLES / "scripts" / "resume_train.py"
pytestmark = pytest.mark.slow


def _resumable(folder: Path) -> Path:
    """A working folder as a job leaves it after 8 steps: its checkpoint at step 8, 8 lines of metrics."""
    folder.mkdir(parents=True)
    subprocess.run([sys.executable, str(RESUMING), "--steps", "8"], cwd=folder, check=True, capture_output=True,
                   timeout=300)
    assert torch.load(folder / "ckpt.pt")["step"] == 8 and len((folder / "metrics.csv").read_text().splitlines()) == 8
    return folder


def _advisor(folder: Path, *options: str, script_args: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "advisor", "run", "--out", str(folder / "reports"), "--format", "json", "--quiet",
            *options, "--", sys.executable, str(RESUMING), *script_args]


def _as_at_a_terminal() -> None:
    """Ctrl-C as a user at a terminal has it: a suite started in the background (``pytest &`` in a script)
    runs with SIGINT ignored, which every child inherits, and Python then installs no handler for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _whole_log(folder: Path) -> list[int]:
    """The steps in metrics.csv; every line whole (a lost buffer or a cut line fails here)."""
    text = (folder / "metrics.csv").read_text()
    assert text.endswith("\n")
    steps = [int(line.split(",")[0]) for line in text.splitlines()]
    assert all(float(line.split(",")[1]) > 0 for line in text.splitlines())
    assert steps == list(range(len(steps)))
    return steps


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_verification_leaves_the_files_exactly_as_the_audited_run_alone_does(tmp_path):
    alone, verified = _resumable(tmp_path / "alone"), tmp_path / "verified"
    shutil.copytree(alone, verified, copy_function=shutil.copy2)
    done = subprocess.run(_advisor(alone, "--no-verify"), cwd=alone, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr
    done = subprocess.run(_advisor(verified, "--pairs", "3", "--disable", "missing-amp"), cwd=verified,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stderr
    for name in ("ckpt.pt", "metrics.csv"):  # byte for byte what the audited run alone leaves (digests: a failure
        # must not make pytest diff 4 MB of bytes)
        assert _digest(verified / name) == _digest(alone / name), (name, torch.load(verified / "ckpt.pt")["step"])
    report = json.loads((verified / "reports" / "resume_train.json").read_text())
    window = report["stages"][0]["note"]
    assert "stopped after 36 steps" in window
    # the buffered log lines are on the disk: 8 before, then one per step the script finished before the stop
    assert len(_whole_log(verified)) == 8 + 35 and torch.load(verified / "ckpt.pt")["step"] == 40
    files = report["files"]
    assert {(c["path"], c["change"]) for c in files["written"]} == {("ckpt.pt", "modified"), ("metrics.csv", "modified")}
    assert files["stopped"].startswith("stopped by advisor at the step window's end, between two steps")
    runs = files["experiment_runs"]
    assert len(runs) >= 6 and {run["label"] for run in runs} >= {"baseline", "with checkpoint-in-step"}
    assert all(run["output_head"].startswith("resumed from step 8\n") for run in runs)  # every arm, the same start
    assert all(run["shadow_files"] >= 1 for run in runs) and files["changed"] == [] and files["checked"] >= 2
    [save] = [f for f in report["findings"] if f["slug"] == "checkpoint-in-step"]
    assert save["verification"]["samples"] >= 3


@pytest.mark.parametrize("stop", ["timeout", signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stopped_run_leaves_a_checkpoint_that_loads(tmp_path, stop):
    folder = _resumable(tmp_path / "job")
    options = ("--timeout", "25", "--no-verify") if stop == "timeout" else ("--no-verify", "--show-output")
    command = _advisor(folder, "--steps", "100000", *options, script_args=("--steps", "100000"))
    runner = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=_as_at_a_terminal)
    if stop != "timeout":
        for line in runner.stdout:  # the script's own output: it has saved twice in its loop
            if line.startswith("saved step 16"):
                break
        runner.send_signal(stop)
    stdout, stderr = runner.communicate(timeout=300)
    assert runner.returncode == 2 and "Traceback" not in stderr, stderr
    report = json.loads((folder / "reports" / "resume_train.json").read_text())
    name = "--timeout" if stop == "timeout" else {signal.SIGINT: "Ctrl-C"}.get(stop, getattr(stop, "name", ""))
    assert report["files"]["stopped"].startswith(f"stopped by advisor ({name}) between two steps"), report["files"]
    [error] = [e for e in report["errors"] if e["kind"] in ("interrupted", "timeout")]
    assert name in error["message"] and "the report holds what was measured until then" in error["message"]
    assert report["timing"] is not None and len(report["timing"]["samples_ms"]) > 0  # what it measured is kept
    assert torch.load(folder / "ckpt.pt")["step"] >= 16
    assert _whole_log(folder)[-1] >= torch.load(folder / "ckpt.pt")["step"] - 1
    left = subprocess.run(["pgrep", "-f", str(RESUMING)], capture_output=True, text=True).stdout.split()
    assert [pid for pid in left if int(pid) != runner.pid and _works_in(int(pid), folder)] == []  # nothing of the
    # job left running (another test's run of the same script, in its own folder, may be)


def _works_in(pid: int, folder: Path) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(folder.resolve())
    except OSError:  # ended meanwhile
        return False


OVERFLOWING = """
    import torch
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(80):
        model(torch.randn(16, 64)).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        with open("activations.bin", "wb") as dump:  # 2 MB each step
            dump.write(bytes(2_000_000))
"""


def test_an_experiment_that_overflows_the_shadow_is_stopped_and_says_which_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = write_model(tmp_path, OVERFLOWING, name="dumps.py")
    result = run_script(RunOptions(command=(sys.executable, str(script)), out_dir=str(tmp_path / "out"), pairs=3,
                                   shadow_limit_mb=1.0))
    [zero] = [f for f in result.report.findings if f.slug == "zero-grad"]
    assert zero.verification.status == "not-verifiable-here"
    assert "did not fit advisor's shadow of your files" in zero.verification.note
    assert "activations.bin" in zero.verification.note and "your files are unchanged" in zero.verification.note
    assert os.path.getsize(tmp_path / "activations.bin") == 2_000_000  # the audited run's own, real


def test_a_change_too_large_to_keep_refuses_the_experiments(tmp_path, monkeypatch):
    folder = _resumable(tmp_path / "job")
    monkeypatch.chdir(folder)
    result = run_script(RunOptions(command=(sys.executable, str(RESUMING)), out_dir=str(tmp_path / "out"),
                                   pairs=2, shadow_limit_mb=1.0))
    note = result.report.verification.note
    assert "changed ckpt.pt, and advisor could not keep its earlier state (4.2 MB, past the 1.0 MB" in note, note
    assert result.report.files.experiment_runs == [] and any("ckpt.pt" in lost for lost in result.report.files.not_kept)
    assert torch.load(folder / "ckpt.pt")["step"] == 40  # the audited run is the user's: its writes stand


BUILDS_A_CACHE = """
    import torch
    from torch import nn

    def get_model():
        with open("builds.log", "a") as log:  # a cache, a downloaded vocabulary: written where it is built
            log.write("built\\n")
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()).eval()

    def get_inputs():
        torch.manual_seed(1)
        return torch.randn(8, 3, 32, 32)
"""


def test_a_model_files_verification_children_write_into_their_shadow(tmp_path, monkeypatch):
    results = {}
    for verify in (False, True):
        folder = tmp_path / ("verified" if verify else "alone")
        folder.mkdir()
        monkeypatch.chdir(folder)
        model = write_model(folder, BUILDS_A_CACHE)
        results[verify] = run_audit(AuditOptions(model_file=str(model), out_dir=str(folder / "out"), verify=verify,
                                                 pairs=3, timeout=300, disabled=("channels-last", "missing-amp")))
    alone, verified = (tmp_path / "alone" / "builds.log").read_text(), (tmp_path / "verified" / "builds.log").read_text()
    assert alone == verified and alone.count("built") >= 1  # the capture's builds only
    files = results[True].report.files
    assert files.experiment_runs and files.changed == []
    assert [(c.path, c.change) for c in files.written] == [("builds.log", "created")]
    measured = [f.verification for f in results[True].report.findings if f.verification is not None]
    assert any(v.samples for v in measured), [f.slug for f in results[True].report.findings]


KEEPS_A_LOG_OPEN = """
    import atexit
    import torch

    log = open("model.log", "w")  # a logger's file, never closed: its buffer reaches the disk at exit
    atexit.register(lambda: open("goodbye.txt", "w").write("the model file's exit handler ran\\n"))

    class Logged(torch.nn.Module):
        def forward(self, x):
            log.write("forward\\n")
            return x * 2

    def get_model():
        log.write("built\\n")
        return Logged()

    def get_inputs():
        return torch.ones(4)
"""


def test_a_child_ends_with_the_files_the_users_code_left_open_flushed(tmp_path, monkeypatch):
    """The capture's child ends promptly once its stages are done, as a stop does: what the user's code
    wrote into a file it never closed is on the disk, and its exit handlers ran."""
    monkeypatch.chdir(tmp_path)
    model = write_model(tmp_path, KEEPS_A_LOG_OPEN)
    result = run_audit(AuditOptions(model_file=str(model), out_dir=str(tmp_path / "out"), verify=False))
    assert result.report.errors == []
    written = (tmp_path / "model.log").read_text()
    assert written.startswith("built\n") and written.count("forward\n") >= 10, written[:200]
    assert (tmp_path / "goodbye.txt").read_text() == "the model file's exit handler ran\n"


WRITES_READ_ONLY = """
    import sys, torch
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(60):
        model(torch.randn(4, 16)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        if step == 30:
            open(sys.argv[1] + "/results.txt", "w")  # WRITE LINE: a read-only place
"""


def test_a_script_that_writes_to_a_read_only_place_fails_clearly(tmp_path):
    folder = read_only_folder()
    if folder is None:
        pytest.skip("no read-only file system is mounted on this machine")
    script = write_model(tmp_path, WRITES_READ_ONLY, name="readonly.py")
    done = subprocess.run([sys.executable, "-m", "advisor", "run", "--out", str(tmp_path / "out"), "--steps", "40",
                           "--", sys.executable, str(script), folder], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "the script failed after 31 step(s)" in done.stderr and "Read-only file system" in done.stderr
    assert f"readonly.py:{line_of(script, 'WRITE LINE')}" in done.stderr
