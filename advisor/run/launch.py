"""Run the user's command with the bootstrap, and turn what the step window wrote into Evidence.

The command runs as given (same cwd, environment, argv) in its own process group, with
PYTHONPATH led by ``boot/`` (its sitecustomize) and advisor's own root, plus the file layer's
environment (the audited run's journal, or an experiment's shadow); stdin is closed, so a script
that reads it sees end-of-file instead of waiting forever.

A run advisor stops (``--timeout``, Ctrl-C, SIGTERM or SIGHUP to advisor) is asked to stop between
two steps, or between two writes when no step comes (``advisor.files.stop``); only one that does
not stop within ``STOP_WAIT_S`` (or a second Ctrl-C) is ended at once. At the end the whole group
is ended: DataLoader workers, torchrun's ranks and other children are never left running.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from advisor.errors import StageError, stop_name
from advisor.machine import procfs
from advisor.run.window_spec import WindowSpec, written
from advisor.sandbox.child import BOOT_DIR, Child, child_environment

INTERRUPT_GRACE_S = 3.0
STOP_WAIT_S = 150.0  # a stop request: the next step, then the writes in flight (a large checkpoint) and the window's files
POLL_S = 0.5  # how often the parent looks at what the step window says while it waits
STACK_DUMP_S = 1.0  # for faulthandler to write each process's stack before the group is ended
ADVISOR_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # where advisor imports from


@dataclass
class ScriptRun:
    """What one run of the script left: the window's files, its output, how it ended."""

    command: list[str]
    scratch: str
    returncode: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""
    interrupted: bool = False  # Ctrl-C or a signal: the script was asked to stop, and what it measured is kept
    stopped_by: str = ""  # "Ctrl-C", "SIGTERM", ... when interrupted
    stop: str = ""  # how advisor ended it: "between steps" (it stopped as asked), "killed", or "" (it ended itself)
    errors: list[StageError] = field(default_factory=list)

    @property
    def rank_folders(self) -> dict[int, str]:
        """Under torchrun, each rank's window writes to its own folder: rank -> folder."""
        found = {}
        for name in os.listdir(self.scratch) if os.path.isdir(self.scratch) else ():
            if name.startswith("rank") and name[4:].isdigit() and os.path.isdir(os.path.join(self.scratch, name)):
                found[int(name[4:])] = os.path.join(self.scratch, name)
        return dict(sorted(found.items()))

    @property
    def folder(self) -> str:
        """Where the window wrote: the script's own, or rank 0's (the report's primary rank)."""
        ranks = self.rank_folders
        return next(iter(ranks.values())) if ranks else self.scratch

    def read(self, name: str, folder: str | None = None) -> dict | None:
        path = os.path.join(folder or self.folder, name)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)

    def trace_of(self, folder: str | None = None) -> str | None:
        path = os.path.join(folder or self.folder, "trace.json.gz")
        return path if os.path.exists(path) else None

    @property
    def trace_path(self) -> str | None:
        return self.trace_of()

    @property
    def folders(self) -> list[str]:
        """Every folder a step window of this run listens and writes in."""
        return [self.scratch, *self.rank_folders.values()]


def launch(command: list[str], window: WindowSpec, timeout: float, progress: Callable[[str], None] = lambda t: None,
           show_output: bool = False, environment: dict[str, str] | None = None, scratch_in: str | None = None,
           experiment: bool = False) -> ScriptRun:
    """Run ``command`` under the bootstrap until it ends, the window stops it, or ``timeout``.
    ``environment``: the file layer's; ``scratch_in``: where advisor's own folder for the run goes;
    ``experiment``: a run of advisor's own (its writes are shadowed), ended at once when stopped."""
    scratch = tempfile.mkdtemp(prefix="advisor-run-", dir=scratch_in)
    run = ScriptRun(command=list(command), scratch=scratch)
    spec_path = os.path.join(scratch, "spec.json")
    written(window.model_copy(update={"out_dir": scratch}), spec_path)
    env = child_environment({"ADVISOR_RUN_SPEC": spec_path}, environment, path_first=(BOOT_DIR, ADVISOR_ROOT),
                            leave_out=("ADVISOR_RUN_OWNER",))
    began = time.monotonic()
    try:
        child = Child(command, scratch, env, show_output=show_output)
    except (FileNotFoundError, PermissionError) as missing:
        run.errors.append(StageError(stage="load", kind="user-code",
                                     message=f"cannot start {command[0]!r}: {missing.strerror or missing}"))
        return run
    try:
        run.returncode = _wait(child.process, timeout, scratch, progress)
    except subprocess.TimeoutExpired:
        run.timed_out = True
        if experiment or not _stop_between_steps(child, run, progress):
            _dump_stacks(spec_path)
            run.stop = "killed"
    except KeyboardInterrupt as interruption:
        run.interrupted, run.stopped_by = True, stop_name(interruption)
        if experiment or not _stop_between_steps(child, run, progress):
            child.interrupt(INTERRUPT_GRACE_S)
            run.stop = "killed"
    finally:
        child.end(graceful=not run.timed_out)
        _end_the_rest(spec_path)
    run.seconds = time.monotonic() - began
    run.stdout, run.stderr = child.output()
    return run


def _wait(child: subprocess.Popen, timeout: float, scratch: str, progress: Callable[[str], None]) -> int:
    """The child's exit code, once it ends; meanwhile, say once what the step window waits for (a training
    script's first optimizer step). TimeoutExpired at ``timeout``."""
    deadline = time.monotonic() + timeout
    waiting = os.path.join(scratch, "waiting.json")
    while True:
        try:
            return child.wait(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
        if waiting and os.path.exists(waiting):
            try:
                with open(waiting, encoding="utf-8") as handle:
                    seen = json.load(handle)
            except (OSError, ValueError):
                continue  # being written: read at the next poll
            waiting = ""
            before = f"; the {seen['forwards']} forward(s) before it are not steps" if seen["forwards"] else ""
            ends = seen.get("ends_at", "each optimizer step")
            progress(f"the script trains ({seen['reason']}): a step ends at {ends}" + (
                f"; waiting for the first (up to --timeout {timeout:g} s){before}" if ends == "each optimizer step" else
                f"{before}"))


def _stop_between_steps(child: Child, run: ScriptRun, progress: Callable[[str], None]) -> bool:
    """Ask the script's step windows to stop (at their next step, or between two writes), and wait.
    False when nobody listened (torch not imported yet), or it did not stop in time: end it at once."""
    def announce() -> None:
        progress(f"stopping the script between two steps (up to {STOP_WAIT_S:g} s; Ctrl-C again ends it at once)")
    if not child.stop_between_writes(run.folders, STOP_WAIT_S, announce):
        return False
    run.returncode, run.stop = child.process.returncode, "between steps"
    return True


def processes_of(spec_path: str) -> list[int]:
    """Every process of this run, whatever its session: torchrun starts each rank in a session of its
    own, out of reach of the run's process group, but all inherit the run's ADVISOR_RUN_SPEC."""
    marker = f"ADVISOR_RUN_SPEC={spec_path}"
    try:
        pids = procfs.process_ids()
    except OSError:
        return []
    return [pid for pid in pids if pid != os.getpid() and procfs.has_environment_entry(pid, marker)]


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _dump_stacks(spec_path: str) -> None:
    """Ask every process of the run for its Python stack (the window registered faulthandler on
    SIGUSR1): where each rank waits when the run hangs. Processes without it just end sooner."""
    pids = processes_of(spec_path)
    _signal_all(pids, signal.SIGUSR1)
    if pids:
        time.sleep(STACK_DUMP_S)


def _end_the_rest(spec_path: str) -> None:
    """What the process group did not reach (torchrun's ranks): ended too, nothing left running."""
    pids = processes_of(spec_path)
    if not pids:
        return
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + INTERRUPT_GRACE_S
    while time.monotonic() < deadline and (pids := processes_of(spec_path)):
        time.sleep(0.1)
    _signal_all(pids, signal.SIGKILL)


def discard(run: ScriptRun) -> None:
    shutil.rmtree(run.scratch, ignore_errors=True)
