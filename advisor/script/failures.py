"""What the parent of ``advisor run`` needs when a run goes wrong, recorded inside the script's process."""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

from advisor.script.window_state import WindowState


def watch_failures(state: WindowState, on_exit: Callable[[], None]) -> None:
    """What the parent needs when the run goes wrong: the Python stacks on SIGUSR1 (sent before a
    timed-out run is ended: where each process waits), and under torchrun the exception that
    ended a rank and what that rank measured when torchrun stops it with SIGTERM."""
    import faulthandler
    import signal

    if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
        stacks = open(os.path.join(state.out, "stacks.txt"), "w")  # noqa: SIM115 - kept open for the signal
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=False)
    if state.spec.rank is None:
        return
    previous = sys.excepthook

    def crashed(kind, value, traceback):
        if state.mine:
            from advisor.errors import user_location

            file, line, code = user_location(traceback, state.script)
            state.write("crash.json", {"rank": state.spec.rank, "error": f"{kind.__name__}: {value}",
                                       "file": file, "line": line, "code": code, "time": time.time()})
        previous(kind, value, traceback)
    sys.excepthook = crashed
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        def stopped(signum, frame):
            from advisor.files.stop import stop_now

            on_exit()
            stop_now(128 + signum)  # once the rank's writes in flight are whole
        signal.signal(signal.SIGTERM, stopped)


def distributed() -> bool:
    """Whether the script initialised a torch.distributed process group."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
