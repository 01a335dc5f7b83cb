"""Run the user's command with the bootstrap, and turn what the step window wrote into Evidence.

The command runs as given (same cwd, environment, argv) in its own process group, with
PYTHONPATH led by ``boot/`` (its sitecustomize) and advisor's own root; stdin is closed, so a
script that reads it sees end-of-file instead of waiting forever. At the end the whole group is
ended: DataLoader workers and other children are never left running.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import advisor
from advisor.errors import StageError
from advisor.sandbox.supervisor import end_process_group, output_tail

BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")
INTERRUPT_GRACE_S = 3.0
STACK_DUMP_S = 1.0  # for faulthandler to write each process's stack before the group is ended
ADVISOR_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(advisor.__file__)))


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
    interrupted: bool = False  # Ctrl-C: the script was asked to stop, and what it measured is kept
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


def launch(command: list[str], window: dict, timeout: float, progress: Callable[[str], None] = lambda t: None,
           show_output: bool = False) -> ScriptRun:
    """Run ``command`` under the bootstrap until it ends, the window stops it, or ``timeout``."""
    scratch = tempfile.mkdtemp(prefix="advisor-run-")
    run = ScriptRun(command=list(command), scratch=scratch)
    spec_path = os.path.join(scratch, "spec.json")
    with open(spec_path, "w", encoding="utf-8") as handle:
        json.dump({**window, "out_dir": scratch}, handle)
    env = {key: value for key, value in os.environ.items() if key != "ADVISOR_RUN_OWNER"}
    env["ADVISOR_RUN_SPEC"] = spec_path
    env["PYTHONPATH"] = os.pathsep.join(p for p in (BOOT_DIR, ADVISOR_ROOT, env.get("PYTHONPATH", "")) if p)
    stdout_path, stderr_path = os.path.join(scratch, "stdout.txt"), os.path.join(scratch, "stderr.txt")
    began = time.monotonic()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        pipe = subprocess.PIPE if show_output else None
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=pipe or out, stderr=pipe or err,
                                     env=env, start_new_session=True)
        except (FileNotFoundError, PermissionError) as missing:
            run.errors.append(StageError(stage="load", kind="user-code",
                                         message=f"cannot start {command[0]!r}: {missing.strerror or missing}"))
            return run
        copiers = [_tee(child.stdout, out, sys.stdout.buffer), _tee(child.stderr, err, sys.stderr.buffer)] \
            if show_output else []
        try:
            run.returncode = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.timed_out = True
            _dump_stacks(spec_path)
        except KeyboardInterrupt:
            run.interrupted = True
            _interrupt(child)
        finally:
            end_process_group(child, graceful=not run.timed_out)
            _end_the_rest(spec_path)
            for copier in copiers:
                copier.join(timeout=5)
    run.seconds = time.monotonic() - began
    run.stdout, run.stderr = output_tail(stdout_path), output_tail(stderr_path)
    return run


def _interrupt(child: subprocess.Popen) -> None:
    """Pass Ctrl-C on to the script (its own session does not get the terminal's), so it can end
    and the step window can write what it measured; the group is ended after a grace period."""
    try:
        os.killpg(child.pid, signal.SIGINT)
        child.wait(timeout=INTERRUPT_GRACE_S)
    except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired, KeyboardInterrupt):
        pass


def processes_of(spec_path: str) -> list[int]:
    """Every process of this run, whatever its session: torchrun starts each rank in a session of its
    own, out of reach of the run's process group, but all inherit the run's ADVISOR_RUN_SPEC."""
    marker = f"ADVISOR_RUN_SPEC={spec_path}".encode()
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


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


def _tee(source, file, terminal) -> threading.Thread:
    """Copy the script's output to its file and to advisor's own terminal as it comes (--show-output)."""
    def copy() -> None:
        for chunk in iter(lambda: source.read1(65536), b""):
            file.write(chunk)
            terminal.write(chunk)
            terminal.flush()
    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def discard(run: ScriptRun) -> None:
    shutil.rmtree(run.scratch, ignore_errors=True)
