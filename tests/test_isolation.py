"""The user's code runs in a supervised child: hangs are stopped, crashes survived."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import pytest

from advisor.sandbox.child import OUTPUT_LIMIT
from conftest import SAMPLES, audit, line_of, write_model

HANG_IN_FORWARD = """
    import os, time, torch
    CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forward_calls.log")
    class Sleepy(torch.nn.Module):
        def forward(self, x):
            with open(CALLS, "a") as log:
                log.write("called\\n")
            time.sleep(3600)
            return x
    def get_model(): return Sleepy()
    def get_inputs(): return torch.ones(2)
"""


def _stage(result, name):
    return next(s for s in result.report.stages if s.stage == name)


@pytest.mark.slow
def test_a_hanging_step_is_stopped_at_the_timeout_and_not_run_again(tmp_path):
    path = write_model(tmp_path, HANG_IN_FORWARD)
    result = audit(path, tmp_path / "out", timeout=4)
    assert (tmp_path / "forward_calls.log").read_text() == "called\n"  # stopped once, never run again
    [error] = result.report.errors
    assert error.stage == "timing" and error.kind == "timeout" and "4 s" in error.message
    assert [_stage(result, s).status for s in ("load", "env", "trace", "graph", "data")] == \
        ["ok", "ok", "skipped", "skipped", "skipped"]
    assert result.report.environment is not None and result.exit_code("high") == 2


@pytest.mark.slow
def test_a_stop_awaits_only_the_users_writes_not_advisors_control_pipe(tmp_path):
    """A child advisor stops waits for the writes in flight (files.gate): the pipe it reports on is open from
    start to end and is no write of the user's (awaited, it held every stopped child 10 s, FILE_GRACE_S)."""
    path = write_model(tmp_path, """
        import os, torch
        from advisor.files.gate import GATE
        def get_model():
            print("AWAITED", sorted(str(getattr(h, "name", h)) for h in GATE.writers if not h.closed))
            return torch.nn.Linear(2, 2)
        def get_inputs(): return torch.ones(1, 2)
    """)
    result = audit(path, tmp_path / "out")
    [line] = [text for text in result.report.output.stdout.splitlines() if text.startswith("AWAITED")]
    assert line == "AWAITED []", line


@pytest.mark.slow
def test_a_hang_on_import_is_a_load_timeout(tmp_path):
    path = write_model(tmp_path, "import time\ntime.sleep(3600)\n")
    result = audit(path, tmp_path / "out", timeout=4)
    [error] = result.report.errors
    assert error.stage == "load" and error.kind == "timeout"


@pytest.mark.slow
def test_a_segfault_in_the_step_is_survived_and_named(tmp_path):
    path = write_model(tmp_path, """
        import ctypes, torch
        class Crashy(torch.nn.Module):
            def forward(self, x):
                ctypes.string_at(0)  # reads address 0: SIGSEGV
                return x
        def get_model(): return Crashy()
        def get_inputs(): return torch.ones(2)
    """)
    result = audit(path, tmp_path / "out")
    [error] = result.report.errors
    assert error.stage == "timing" and error.kind == "crash" and "SIGSEGV" in error.message
    assert _stage(result, "graph").status == "skipped"


@pytest.mark.slow
def test_no_scratch_folder_is_left_behind(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where mkdtemp puts the children's folders
    path = write_model(tmp_path, """
        import os, torch
        class Exits(torch.nn.Module):
            def forward(self, x):
                os._exit(3)
        def get_model(): return Exits()
        def get_inputs(): return torch.ones(2)
    """)
    crashed = audit(path, tmp_path / "out")
    assert crashed.report.errors and crashed.report.errors[0].kind == "crash"
    healthy = audit(SAMPLES / "zero_grad_in_place.py", tmp_path / "out", verify=True, pairs=4)
    assert [f.verification.status for f in healthy.report.findings if f.verification] != []  # a fix was measured in a child
    assert list(scratch.iterdir()) == []


@pytest.mark.slow
def test_os_abort_is_survived(tmp_path):
    path = write_model(tmp_path, """
        import os, torch
        def get_model(): return torch.nn.Linear(2, 2)
        def get_inputs():
            os.abort()
    """)
    [error] = audit(path, tmp_path / "out").report.errors
    assert error.stage == "load" and "SIGABRT" in error.message


@pytest.mark.slow
def test_os_exit_is_reported_with_its_code(tmp_path):
    path = write_model(tmp_path, """
        import os, torch
        def get_model(): os._exit(7)
        def get_inputs(): return torch.ones(2)
    """)
    [error] = audit(path, tmp_path / "out").report.errors
    assert error.kind == "crash" and "code 7" in error.message


@pytest.mark.slow
def test_sys_exit_on_import_is_a_clear_user_error(tmp_path):
    path = write_model(tmp_path, "import sys\nprint('bye')\nsys.exit(3)\n")
    [error] = audit(path, tmp_path / "out").report.errors
    assert error.kind == "user-code" and "sys.exit(3)" in error.message and error.line == 3


@pytest.mark.slow
def test_user_output_is_captured_truncated_and_kept_off_the_terminal(tmp_path):
    path = write_model(tmp_path, """
        import sys, torch
        def get_model():
            for i in range(20000):
                print(f"noisy line {i}")
            print("to stderr", file=sys.stderr)
            return torch.nn.Linear(2, 2)
        def get_inputs(): return torch.ones(1, 2)
    """)
    completed = subprocess.run(
        [sys.executable, "-m", "advisor", "audit", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-verify"],
        capture_output=True, text=True, timeout=300,
    )
    assert "noisy line" not in completed.stdout + completed.stderr
    report = (tmp_path / "out" / "model.json").read_text()
    from advisor.report.schema import Report

    output = Report.model_validate_json(report).output
    assert output.stdout.startswith("noisy line 0") and "noisy line 19999" in output.stdout
    assert "characters cut" in output.stdout and len(output.stdout) < OUTPUT_LIMIT + 200
    assert "to stderr" in output.stderr


@pytest.mark.slow
def test_a_hung_loader_with_worker_processes_is_stopped(tmp_path):
    path = write_model(tmp_path, """
        import time, torch
        from torch.utils.data import DataLoader, Dataset
        class Stuck(Dataset):
            def __len__(self): return 8
            def __getitem__(self, i):
                time.sleep(3600)
        def get_model(): return torch.nn.Linear(2, 2)
        def get_inputs(): return torch.ones(1, 2)
        def get_dataloader(): return DataLoader(Stuck(), batch_size=2, num_workers=2)
    """)
    result = audit(path, tmp_path / "out", timeout=6)
    [error] = result.report.errors
    assert error.stage == "data" and error.kind == "timeout"
    assert result.report.timing is not None  # earlier stages' evidence is kept
    assert "gave no batch within 3 s, so the step ran on get_inputs()" in result.report.target.input_note


@pytest.mark.slow
def test_cli_prints_one_paragraph_and_no_traceback_unless_debug(tmp_path):
    path = write_model(tmp_path, """
        import torch
        def get_model():
            raise ValueError("no checkpoint at /models/x.pt")
        def get_inputs(): return torch.ones(1)
    """)
    command = [sys.executable, "-m", "advisor", "audit", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-verify"]
    plain = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 2
    assert f"{path}: the load stage failed ({path}:{line_of(path, 'raise ValueError')}" in plain.stderr
    assert "ValueError: no checkpoint at /models/x.pt" in plain.stderr
    assert "Traceback" not in plain.stderr
    debug = subprocess.run(command + ["--debug"], capture_output=True, text=True, timeout=300)
    assert debug.returncode == 2 and "Traceback" in debug.stderr
    assert (tmp_path / "out" / "model.html").exists()  # the report is written even so


@pytest.mark.slow
def test_cli_rejects_a_missing_model_file(tmp_path):
    missing = tmp_path / "nope.py"
    completed = subprocess.run([sys.executable, "-m", "advisor", "audit", str(missing)],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and f"{missing}: no such file" in completed.stderr
    assert "Traceback" not in completed.stderr
