"""Wall time and peak memory of a whole command, as a user waits for it (imports included).

Shared by the benches: each command runs under a wrapper process of its own, whose
``RUSAGE_CHILDREN`` high-water mark is then the command's alone (the peak resident set of its
largest process: the main one, or a worker of its pool).
"""

from __future__ import annotations

import subprocess
import sys
import time


def measured(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB of the largest process) of ``command``."""
    wrapper = ("import resource, subprocess, sys\n"
               f"subprocess.run({command!r}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, check=False)
    return time.perf_counter() - began, int(done.stdout.strip() or 0) / 1024
