"""advisor's request to stop the script (Ctrl-C, SIGTERM or SIGHUP to advisor, ``--timeout``), in the
script's process: at the end of its next step, or, when no step ends soon (a hung collective, a slow
data stage), between two writes, from the stop listener's thread. Either way the step window writes
what it measured and the process ends once every write advisor sees is whole (``advisor.files``)."""

from __future__ import annotations

import os
import sys
import threading

from advisor.files import stop
from advisor.files.intercept import suspended
from advisor.script.window_end import WindowEnd

STEP_WAIT_S = 5.0  # how long the next step's end is awaited before stopping between writes


class StopRequest:
    def __init__(self, end: WindowEnd):
        self.end = end
        self._asked = threading.Event()
        self._at_step = threading.Event()
        self._one_way_out = threading.Lock()  # at a step's end, or between writes: never both

    @property
    def pending(self) -> bool:
        return self._asked.is_set()

    def requested(self) -> None:
        """In the stop listener's thread."""
        self._asked.set()
        if self._at_step.wait(STEP_WAIT_S) or not self._one_way_out.acquire(blocking=False):
            return
        state = self.end.state
        with suspended():
            _write_main_stack(os.path.join(state.out, "stacks.txt"))
            state.write("window.json", {**self.end.measured(stopped=True), "interrupted": True, "between_steps": False})
        stop.stop_now(0)

    def at_step(self) -> None:
        """In the main thread, at a step's end."""
        if not self._one_way_out.acquire(blocking=False):
            threading.Event().wait()  # the listener's thread is ending the process
        self._at_step.set()
        if not self.end.state.done:
            self.end.end_early()
            self.end.finish(stopped=True, interrupted=True)
        stop.stop_now(0, at_boundary=True)


def _write_main_stack(path: str) -> None:
    """Where the main thread is, in faulthandler's form (the parent reads where a hung rank waits)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    lines = ["Stack (most recent call first):"]
    while frame is not None:
        lines.append(f'  File "{frame.f_code.co_filename}", line {frame.f_lineno} in {frame.f_code.co_name}')
        frame = frame.f_back
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
