"""advisor's request to stop a process of the run: between two steps, never in the middle of a write.

The process listens on a named pipe in its own folder (``stop.fifo``), in a thread of its own, so a
request reaches it even while its main thread waits in native code (a collective, a hung loader).
A request calls the owner of the process's steps (the step window), which stops at the next step's
end; a process without one ends as soon as no write is in flight. The parent asks with ``request``.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Callable

from advisor.files.gate import GATE
from advisor.files.intercept import suspended

FIFO = "stop.fifo"
_handler: Callable[[], None] | None = None


def on_request(handler: Callable[[], None]) -> None:
    global _handler
    _handler = handler


def listen(folder: str) -> None:
    path = os.path.join(folder, FIFO)
    try:
        os.mkfifo(path, 0o600)
    except OSError:
        return  # no stop requests: the parent ends the process as before
    threading.Thread(target=_wait, args=(path,), daemon=True, name="advisor-stop").start()


def _wait(path: str) -> None:
    with suspended():
        descriptor = os.open(path, os.O_RDONLY)  # blocks until the parent opens it to write
        os.read(descriptor, 1)
        os.close(descriptor)
    (_handler or stop_now)()


def stop_now(code: int = 0, at_boundary: bool = False) -> None:
    """End this process once the writes in flight are done and every open file is flushed."""
    sys.stdout.flush()
    sys.stderr.flush()
    GATE.quiesce(at_boundary)
    os._exit(code)


def request(folders: list[str]) -> int:
    """Ask the processes listening in ``folders`` to stop; how many were asked."""
    asked = 0
    for folder in folders:
        try:
            descriptor = os.open(os.path.join(folder, FIFO), os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue  # nobody listens there (yet, or any more)
        try:
            os.write(descriptor, b"s")
            asked += 1
        except OSError:
            pass
        finally:
            os.close(descriptor)
    return asked
