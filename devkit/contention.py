"""Contention made for real, for the measurement-quality tests: a busy-loop process pinned to a CPU beside
the measurement, and a cgroup CPU quota where this kernel lets the test create one (root, cgroup v1 or v2)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

BUSY_LOOP = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nprint('spinning', flush=True)\nwhile True: pass\n"
# Started by a launcher that exits at once: the loop is another job's, not a child of the measured process
# (whose children's CPU time is its own).
LAUNCHER = ("import subprocess, sys\n"
            "hog = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True,"
            " stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)\n"
            "assert hog.stdout.readline().strip() == 'spinning'\nprint(hog.pid, flush=True)\n")


@contextlib.contextmanager
def busy_loop(cpu: int) -> Iterator[int]:
    """A process spinning on ``cpu`` until the block ends (its pid); it spins when the block begins."""
    launched = subprocess.run([sys.executable, "-c", LAUNCHER, BUSY_LOOP, str(cpu)], capture_output=True, text=True,
                              timeout=60, check=True)
    pid = int(launched.stdout.split()[0])
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def spin(seconds: float) -> None:
    """This process's own work for ``seconds`` of wall time."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _cgroup_v1_cpu() -> Path | None:
    root = Path("/sys/fs/cgroup/cpu")
    return root if (root / "cpu.cfs_quota_us").exists() else None


def _cgroup_v2() -> Path | None:
    root = Path("/sys/fs/cgroup")
    return root if (root / "cgroup.controllers").exists() and "cpu" in (root / "cgroup.controllers").read_text() else None


@contextlib.contextmanager
def cpu_quota(cores: float) -> Iterator[Path]:
    """A fresh cgroup limited to ``cores`` of CPU; yields the file a process writes its pid into to join it.
    Raises OSError where the cgroup cannot be made (not root, a read-only cgroupfs, no cpu controller)."""
    period = 100_000
    name = f"advisor-test-{uuid.uuid4().hex[:8]}"
    if (v1 := _cgroup_v1_cpu()) is not None:
        group = v1 / name
        group.mkdir()
        try:
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(int(cores * period)))
            yield group / "cgroup.procs"
        finally:
            _remove(group)
        return
    if (v2 := _cgroup_v2()) is not None:
        group = v2 / name
        group.mkdir()
        try:
            (group / "cpu.max").write_text(f"{int(cores * period)} {period}")
            yield group / "cgroup.procs"
        finally:
            _remove(group)
        return
    raise OSError("no cgroup cpu controller is mounted here")


def _remove(group: Path) -> None:
    for _ in range(50):  # the members must have left first
        try:
            os.rmdir(group)
            return
        except OSError:
            time.sleep(0.1)
