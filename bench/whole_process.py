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
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_sources() -> None:
    """Write advisor's bytecode, as ``pip install`` does for an installed package (HTA's included): an
    editable checkout under PYTHONDONTWRITEBYTECODE would otherwise compile every module on every run."""
    compileall.compile_dir(os.path.join(ROOT, "advisor"), quiet=1)


def measured(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB of the largest process) of ``command``, run from a scratch folder
    (from a checkout, ``python -m advisor`` would import the checkout rather than the installed advisor).

    Raises RuntimeError when the command fails (exit status 2 or more: 1 is advisor's findings gate).
    """
    # the clock runs in the wrapper, around the command alone: the wrapper's own start-up is not the command's
    wrapper = ("import resource, subprocess, sys, time\n"
               "began = time.perf_counter()\n"
               f"done = subprocess.run({command!r}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
               "seconds = time.perf_counter() - began\n"
               "print(seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)\n"
               "sys.stderr.write(done.stderr[-2000:])\n")
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, check=False, cwd=scratch)
    seconds, peak_kb, status = done.stdout.split()
    if int(status) not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} failed ({status}): {done.stderr.strip()}")
    return float(seconds), int(peak_kb) / 1024
