"""The one way advisor starts a child process and ends it: the capture worker that runs a model file
(``supervisor.py``) and the user's own command (``run/launch.py``) alike.

A child runs in a session of its own, so that ending its process group ends its DataLoader workers and
torchrun's ranks with it; its stdin is closed (a script that reads it sees end-of-file instead of waiting
forever); its stdout and stderr go to files in advisor's folder for it (and to advisor's terminal as they come,
when asked), kept truncated for the report. Its environment is the caller's, plus the file layer's (the audited
run's journal, or an experiment's shadow), with the bootstrap first on ``PYTHONPATH`` where the child must install
the file layer or the step window before it runs anything. Asked to stop, it is stopped between two writes or
steps (``advisor.files.stop``); whatever is left of its group is killed at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from advisor.files import stop
from advisor.machine.conditions import OWN_GROUP_ENV

BOOT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "script", "boot")
OUTPUT_LIMIT = 8000  # characters of the child's stdout/stderr kept for the report
EXIT_WAIT_S = 5.0  # a child that finished: how long it may take to shut down before its group is killed


def child_environment(settings: dict[str, str], layer: dict[str, str] | None, path_first: tuple[str, ...] = (),
                      leave_out: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment (less ``leave_out``) with the child's ``settings`` and the file ``layer``'s,
    marked as a job's own process group, with ``path_first`` put before ``PYTHONPATH``."""
    env = {key: value for key, value in os.environ.items() if key not in leave_out}
    env.update(settings)
    env.update(layer or {})
    env[OWN_GROUP_ENV] = "1"  # its session is the job's: torchrun's ranks and loader workers share its group
    if path_first:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (*path_first, env.get("PYTHONPATH", "")) if p)
    return env


class Child:
    """A started child: its process, where its output goes, how to stop and end it."""

    def __init__(self, command: list[str], folder: str, env: dict[str, str], pass_fds: tuple[int, ...] = (),
                 show_output: bool = False):
        """Raises FileNotFoundError or PermissionError when ``command`` cannot be started."""
        self.stdout_path, self.stderr_path = os.path.join(folder, "stdout.txt"), os.path.join(folder, "stderr.txt")
        self._copiers: list[threading.Thread] = []
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            pipe = subprocess.PIPE if show_output else None
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=pipe or out,
                                            stderr=pipe or err, pass_fds=pass_fds, env=env, start_new_session=True)
            if show_output:  # the copiers hold the files open until the child's output ends
                self._copiers = [_tee(self.process.stdout, open(self.stdout_path, "ab"), sys.stdout.buffer),
                                 _tee(self.process.stderr, open(self.stderr_path, "ab"), sys.stderr.buffer)]

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop_between_writes(self, folders: list[str], wait_s: float, announce=lambda: None) -> bool:
        """Ask the child (listening in ``folders``) to stop at its next step, or between two writes, and wait up to
        ``wait_s``. False when nobody listened (the child has not got that far), or it did not end in time."""
        if not stop.request(folders):
            return False
        announce()
        try:
            self.process.wait(timeout=wait_s)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            return False
        return True

    def interrupt(self, grace_s: float) -> None:
        """Pass Ctrl-C on to the child's group (its own session does not get the terminal's), so that it can end
        and write what it measured, and wait up to ``grace_s`` for it."""
        try:
            os.killpg(self.process.pid, signal.SIGINT)
            self.process.wait(timeout=grace_s)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired, KeyboardInterrupt):
            pass

    def end(self, graceful: bool) -> None:
        """End the child's whole process group: a child that finished (``graceful``) gets a moment to shut down;
        hung children and loader workers left behind are killed."""
        end_process_group(self.process, graceful)

    def output(self) -> tuple[str, str]:
        """The child's stdout and stderr, each truncated in the middle to ``OUTPUT_LIMIT`` characters (once the
        processes that still held its output, torchrun's ranks in sessions of their own, have ended too)."""
        for copier in self._copiers:
            copier.join(timeout=EXIT_WAIT_S)
        return output_tail(self.stdout_path), output_tail(self.stderr_path)


def end_process_group(process: subprocess.Popen, graceful: bool) -> None:
    if graceful and process.poll() is None:
        try:
            process.wait(timeout=EXIT_WAIT_S)  # a worker that sent "exit" is shutting down
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # leftovers: hung children, loader workers
    except (ProcessLookupError, PermissionError):
        pass
    if process.poll() is None:
        process.wait()


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


def _tee(source, file, terminal) -> threading.Thread:
    """Copy the child's output to its file and to advisor's own terminal as it comes (--show-output)."""
    def copy() -> None:
        with file:
            for chunk in iter(lambda: source.read1(65536), b""):
                file.write(chunk)
                terminal.write(chunk)
                terminal.flush()
    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread
