"""Run the capture worker in a child process and survive whatever the user's code does.

Each stage gets ``timeout`` seconds; a stage that runs over is ended (with the child's whole
process group, loader workers included) and later stages are not attempted. A crash (signal,
``os.abort()``, ``os._exit``) is reported against the stage that was running. The child is
started, stopped and ended as every child of advisor's is (``child.py``).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from advisor.errors import StageError
from advisor.sandbox.child import BOOT_DIR, Child, child_environment
from advisor.sandbox.registry import StagePlan
from advisor.sandbox.specs import AnySpec, written

STOP_WAIT_S = 30.0  # a stopped child: its writes in flight finish before it ends
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
    spec: AnySpec,
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
    spec = spec.model_copy(update={"workdir": workdir, "stages": list(plan.stages), "stage_modules": list(plan.modules)})
    spec_path = os.path.join(workdir, "spec.json")
    written(spec, spec_path)
    run = CaptureRun(outcomes={s: StageOutcome(s, "not-run") for s in plan.stages})
    read_fd, write_fd = os.pipe()
    env = child_environment({"ADVISOR_CONTROL_FD": str(write_fd), "PYTHONUNBUFFERED": "1"}, environment,
                            path_first=(BOOT_DIR,) if environment else ())  # the bootstrap installs the file layer
    env.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    child = Child([sys.executable, "-m", "advisor.sandbox.worker", spec_path], workdir, env, pass_fds=(write_fd,))
    os.close(write_fd)
    finished = False
    try:
        finished = _follow(child.process, read_fd, run, timeout, progress, on_start)
    finally:
        os.close(read_fd)
        if not finished and child.process.poll() is None:  # a stage over its time, Ctrl-C: its writes end whole
            child.stop_between_writes([workdir], STOP_WAIT_S)
        child.end(graceful=finished)
    run.stdout, run.stderr = child.output()
    shutil.rmtree(workdir, ignore_errors=True)  # one folder per child: an audit must not leave them behind
    return run


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
