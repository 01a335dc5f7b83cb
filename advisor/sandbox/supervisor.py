"""Run the capture worker in a child process and survive whatever the user's code does.

Each stage gets ``timeout`` seconds; a stage that runs over is ended (with the child's whole
process group, loader workers included) and later stages are not attempted. A crash (signal,
``os.abort()``, ``os._exit``) is reported against the stage that was running. The child's
stdout and stderr are captured to files and kept, truncated, for the report.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from advisor.conditions import OWN_GROUP_ENV
from advisor.errors import StageError
from advisor.files import stop
from advisor.sandbox.registry import StagePlan

BOOT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run", "boot")
STOP_WAIT_S = 30.0  # a stopped child: its writes in flight finish before it ends
OUTPUT_LIMIT = 8000  # characters of the child's stdout/stderr kept for the report
# Starting Python and importing torch is advisor's cost, not a stage's: the stage clock starts when
# the child says it is ready. Until then it gets this long (a cold disk on a slow machine).
STARTUP_LIMIT_S = 120.0


@dataclass
class StageOutcome:
    stage: str
    status: str  # ok | error | skipped | not-run
    seconds: float = 0.0
    result: str | None = None  # the stage's JSON result (the child's file is removed with its folder)
    error: StageError | None = None
    note: str = ""


@dataclass
class CaptureRun:
    outcomes: dict[str, StageOutcome] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""

    def result(self, stage: str) -> str | None:
        outcome = self.outcomes.get(stage)
        return outcome.result if outcome is not None and outcome.status == "ok" else None

    @property
    def errors(self) -> list[StageError]:
        return [o.error for o in self.outcomes.values() if o.error is not None]


def run_capture(
    spec: dict,
    timeout: float,
    plan: StagePlan,
    progress: Callable[[str], None] = lambda text: None,
    environment: dict[str, str] | None = None,
    scratch_in: str | None = None,
    on_start: Callable[[str, CaptureRun], None] = lambda stage, run: None,
) -> CaptureRun:
    """Run the ``plan``'s stages in a fresh child. ``environment``: the file layer's (the capture's journal, or a
    verification child's shadow); ``scratch_in``: where the child's own folder goes; ``on_start``: called as each
    stage starts, with what the stages before it returned."""
    workdir = tempfile.mkdtemp(prefix="advisor-", dir=scratch_in)
    spec = {**spec, "workdir": workdir, "stages": list(plan.stages), "stage_modules": list(plan.modules)}
    spec_path = os.path.join(workdir, "spec.json")
    with open(spec_path, "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    run = CaptureRun(outcomes={s: StageOutcome(s, "not-run") for s in plan.stages})
    stdout_path, stderr_path = os.path.join(workdir, "stdout.txt"), os.path.join(workdir, "stderr.txt")
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "ADVISOR_CONTROL_FD": str(write_fd), "PYTHONUNBUFFERED": "1", OWN_GROUP_ENV: "1",
           **(environment or {})}
    env.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    if environment:  # the bootstrap installs the file layer before the child runs anything
        env["PYTHONPATH"] = os.pathsep.join(p for p in (BOOT_DIR, env.get("PYTHONPATH", "")) if p)
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "advisor.sandbox.worker", spec_path],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=(write_fd,), env=env,
            start_new_session=True,  # its own process group: a timeout ends loader workers too
        )
    os.close(write_fd)
    finished = False
    try:
        finished = _follow(child, read_fd, run, timeout, progress, on_start)
    finally:
        os.close(read_fd)
        if not finished:
            _stop_between_writes(child, workdir)
        end_process_group(child, graceful=finished)
    run.stdout = output_tail(stdout_path)
    run.stderr = output_tail(stderr_path)
    shutil.rmtree(workdir, ignore_errors=True)  # one folder per child: an audit must not leave them behind
    return run


def _stop_between_writes(child: subprocess.Popen, workdir: str) -> None:
    """A child advisor ends (a stage over its time, Ctrl-C) ends once its writes in flight are whole."""
    if child.poll() is None and stop.request([workdir]):
        try:
            child.wait(timeout=STOP_WAIT_S)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            pass


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _follow(child, read_fd, run: CaptureRun, timeout: float, progress, on_start) -> bool:
    """Read the child's reports until it says exit (True), dies or times out (False)."""
    buffer = b""
    current: str | None = None
    started = time.monotonic()
    child_ready = False  # the child has started Python and imported torch
    while True:
        remaining = (timeout if child_ready else max(timeout, STARTUP_LIMIT_S)) - (time.monotonic() - started)
        if remaining <= 0:
            stage = current or "load"
            _fail_current(run, stage, StageError(
                stage=stage, kind="timeout",
                message=f"still running after {timeout:g} s (--timeout); it was stopped and the model was not run again",
            ), started)
            return False
        ready, _, _ = select.select([read_fd], [], [], min(remaining, 1.0))
        if not ready:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:  # the child is gone
            child.wait(timeout=5)
            if current is not None or any(o.status == "not-run" for o in run.outcomes.values()):
                stage = current or next(s for s, o in run.outcomes.items() if o.status == "not-run")
                _fail_current(run, stage, _crash_error(stage, child.returncode), started)
            return False
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line)
            kind, stage = message["kind"], message.get("stage")
            if kind == "exit":
                return True
            if kind == "ready":
                child_ready, started = True, time.monotonic()
            elif kind == "start":
                current, started = stage, time.monotonic()
                progress(f"{stage} …")
                on_start(stage, run)
            elif kind == "progress":
                progress(f"{stage}: {message['text']}")
            elif kind == "done":
                run.outcomes[stage] = StageOutcome(stage, "ok", time.monotonic() - started,
                                                   result=_read(message["result"]))
                current = None
                progress(f"{stage} done ({run.outcomes[stage].seconds:.1f} s)")
            elif kind == "error":
                error = StageError.model_validate(message["error"])
                run.outcomes[stage] = StageOutcome(stage, "error", time.monotonic() - started, error=error)
                current = None
                progress(f"{stage} failed")
            elif kind == "skipped":
                run.outcomes[stage] = StageOutcome(stage, "skipped", note=message.get("reason", ""))
                progress(f"{stage} skipped: {message.get('reason', '')}")
        if current is None:
            started = time.monotonic()  # time between stages counts against the next one


def _fail_current(run: CaptureRun, stage: str, error: StageError, started: float) -> None:
    run.outcomes[stage] = StageOutcome(stage, "error", time.monotonic() - started, error=error)
    for name, outcome in run.outcomes.items():
        if outcome.status == "not-run" and name != stage:
            outcome.status = "skipped"
            outcome.note = f"not attempted: the {stage} stage {'timed out' if error.kind == 'timeout' else 'crashed'}"


def _crash_error(stage: str, returncode: int | None) -> StageError:
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        cause = f"the model process was killed by {name}"
        if name == "SIGSEGV":
            cause += " (a segmentation fault, in native code called by the model)"
        elif name == "SIGABRT":
            cause += " (os.abort() or a failed native assertion)"
        elif name == "SIGKILL":
            cause += " (possibly the system ran out of memory)"
    else:
        cause = f"the model process exited with code {returncode} without finishing the stage (os._exit or a native exit)"
    return StageError(stage=stage, kind="crash", message=cause + "; the model was not run again")


def end_process_group(child: subprocess.Popen, graceful: bool) -> None:
    if graceful and child.poll() is None:
        try:
            child.wait(timeout=5)  # a worker that sent "exit" is shutting down
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(child.pid, signal.SIGKILL)  # leftovers: hung children, loader workers
    except (ProcessLookupError, PermissionError):
        pass
    if child.poll() is None:
        child.wait()


def output_tail(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if len(text) <= OUTPUT_LIMIT:
        return text
    half = OUTPUT_LIMIT // 2
    dropped = len(text) - OUTPUT_LIMIT
    return f"{text[:half]}\n… [{dropped} characters cut] …\n{text[-half:]}"
