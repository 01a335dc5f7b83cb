"""Writes in flight, and the stop that waits for them.

Every file the process opens for writing is registered with the step it was opened in; operations
that write a file by name from native code (``torch.save``) are counted while they run. Before
advisor ends a process (the window's end, a stop request, torchrun stopping a rank), ``quiesce``
closes the gate: other threads' new writes wait (for ever: the process is about to end), the
writes in flight finish (an operation, or a file opened during the current step by another thread),
and every file still open is flushed, so what the script wrote reaches the disk whole.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from contextlib import contextmanager

FILE_GRACE_S = 10.0  # a file another thread keeps open this long is a log, flushed rather than awaited
OPERATION_GRACE_S = 300.0  # a checkpoint being written: awaited far longer


class Gate:
    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a forked worker starts with an open gate

    def _reset(self) -> None:
        self._lock = threading.Condition()
        self._closed_by: int | None = None
        self._operations = 0
        self._local = threading.local()
        self.step = 0
        self.writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def boundary(self) -> None:
        """A step ended: files opened from now on belong to the next step."""
        self.step += 1

    def register(self, handle) -> None:
        with self._lock:
            self._wait_while_closed()
            try:
                self.writers[handle] = (threading.get_ident(), self.step)
            except TypeError:
                pass  # not weakly referenceable: nothing to flush later

    @contextmanager
    def operation(self):
        """A write by name in native code: the stop waits for it."""
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            with self._lock:
                self._wait_while_closed()
                self._operations += 1
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                with self._lock:
                    self._operations -= 1
                    self._lock.notify_all()

    def _wait_while_closed(self) -> None:
        if getattr(self._local, "depth", 0):
            return  # inside an operation the stop is waiting for: let it finish
        while self._closed_by is not None and self._closed_by != threading.get_ident():
            self._lock.wait()

    def quiesce(self, at_boundary: bool) -> list[str]:
        """Close the gate, wait for the writes in flight, flush what is open. ``at_boundary``: called by
        the thread that runs the steps, at a step's end (its own open files are logs, not writes in flight).
        Returns what could not be awaited."""
        me = threading.get_ident()
        began = time.monotonic()
        left_open: list[str] = []
        with self._lock:
            self._closed_by = me
            while True:
                writing = [handle for handle, (thread, step) in list(self.writers.items())
                           if not handle.closed and step == self.step and not (at_boundary and thread == me)]
                waited = time.monotonic() - began
                if self._operations and waited < OPERATION_GRACE_S:
                    self._lock.wait(0.02)
                    continue
                if writing and waited < FILE_GRACE_S:
                    self._lock.wait(0.02)
                    continue
                if self._operations:
                    left_open.append(f"{self._operations} write(s) by name still running after {OPERATION_GRACE_S:g} s")
                left_open += [f"{getattr(h, 'name', '?')} still open after {FILE_GRACE_S:g} s (flushed)" for h in writing]
                break
        for handle in list(self.writers):
            try:
                if not handle.closed:
                    handle.flush()
            except (OSError, ValueError):
                continue
        return left_open


GATE = Gate()
