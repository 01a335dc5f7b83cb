"""Wall time and peak memory of a whole command, as a user waits for it (imports included).

Shared by the benches: each command runs under a wrapper process of its own, whose
``RUSAGE_CHILDREN`` high-water mark is then the command's alone (the peak resident set of its
largest process: the main one, or a worker of its pool).
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_sources() -> None:
    """Write advisor's bytecode, as ``pip install`` does for an installed package (HTA's included): an
    editable checkout under PYTHONDONTWRITEBYTECODE would otherwise compile every module on every run."""
    for folder in ("advisor", "rules"):
        compileall.compile_dir(os.path.join(ROOT, folder), quiet=1)


def measured(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB of the largest process) of ``command``."""
    wrapper = ("import resource, subprocess, sys\n"
               f"subprocess.run({command!r}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, check=False)
    return time.perf_counter() - began, int(done.stdout.strip() or 0) / 1024
