"""The one reader of Linux's ``/proc``: every file advisor reads there, parsed into plain values.

Where ``/proc`` cannot be read (another OS, a container that hides it, a process that ended or is not ours), a
reader of one process returns an empty value; a reader of the whole machine raises ``OSError`` so that its caller
can name what went unread and why (``conditions.py`` writes it into the measurement's ``unreadable``).
"""

from __future__ import annotations

import os

PROC = "/proc"


def _text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


# --- the machine ----------------------------------------------------------------------------------------

def cpu_ticks() -> dict[int, list[int]]:
    """Per CPU, its first eight counters from ``/proc/stat``; raises OSError where it cannot be read."""
    return parse_proc_stat(_text(f"{PROC}/stat"))


def parse_proc_stat(text: str) -> dict[int, list[int]]:
    """Per CPU, its first eight counters (user nice system idle iowait irq softirq steal), in ticks."""
    cpus = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit():
            values = [int(v) for v in rest.split()[:8]]
            cpus[int(name[3:])] = values + [0] * (8 - len(values))
    return cpus


def process_ids() -> list[int]:
    """Every process this one can see; raises OSError where ``/proc`` cannot be listed."""
    return [int(name) for name in os.listdir(PROC) if name.isdigit()]


def cpu_model_and_flags() -> tuple[str, set[str]]:
    """The first CPU's model name and feature flags from ``/proc/cpuinfo``; empty where unreadable."""
    model, flags = "", set()
    try:
        with open(f"{PROC}/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    return model, flags


def available_memory_kb() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo``: what the host can still give without swapping."""
    return _field_kb(f"{PROC}/meminfo", "MemAvailable")


# --- one process ----------------------------------------------------------------------------------------

def process_times(pid: int) -> tuple[int, int, int, int] | None:
    """(parent, process group, own CPU ticks, its waited-for children's CPU ticks) of ``pid``; None when it
    ended meanwhile or is not ours to read."""
    try:
        text = _text(f"{PROC}/{pid}/stat")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command in parentheses may hold spaces
    if len(fields) <= 14:  # ppid pgrp ... utime stime cutime cstime (proc(5), from the state on)
        return None
    return int(fields[1]), int(fields[2]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def command(pid: int) -> str:
    """A process's command on one short line (its program's name and first two arguments, ``-c`` code too);
    ``pid N`` where it cannot be read."""
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as handle:
            parts = [p.decode(errors="replace") for p in handle.read().split(b"\0") if p]
    except OSError:
        parts = []
    if not parts:
        return f"pid {pid}"
    return " ".join(" ".join([os.path.basename(parts[0]), *parts[1:3]]).split())[:80]


def has_environment_entry(pid: int, entry: str) -> bool:
    """Whether ``NAME=value`` is in the environment ``pid`` started with (False where it cannot be read)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as handle:
            return entry.encode() in handle.read().split(b"\0")
    except OSError:
        return False


def working_directory(pid: int) -> str | None:
    try:
        return os.readlink(f"{PROC}/{pid}/cwd")
    except OSError:
        return None


# --- this process ---------------------------------------------------------------------------------------

def open_file_path(fd: int) -> str:
    """The path this process opened as ``fd`` (a folder for ``dir_fd`` calls); raises OSError."""
    return os.readlink(f"{PROC}/self/fd/{fd}")


def own_memory_kb(field: str) -> int | None:
    """A field of ``/proc/self/status`` in kB: ``VmRSS`` (resident now), ``VmHWM`` (its high-water mark)."""
    return _field_kb(f"{PROC}/self/status", field)


def reset_peak_memory() -> bool:
    """Reset this process's ``VmHWM`` to its current resident set, where the kernel allows it."""
    try:
        with open(f"{PROC}/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def cgroup_memberships() -> list[tuple[str, str]]:
    """(controllers, path) per line of ``/proc/self/cgroup`` ("" controllers: the unified hierarchy)."""
    try:
        lines = _text(f"{PROC}/self/cgroup").splitlines()
    except OSError:
        return []
    return [(parts[1], parts[2]) for parts in (line.split(":", 2) for line in lines) if len(parts) == 3]


def mounts() -> list[list[str]]:
    """The fields of each line of ``/proc/self/mounts`` (device, mount point, type, options, ...)."""
    try:
        return [line.split() for line in _text(f"{PROC}/self/mounts").splitlines()]
    except OSError:
        return []


def _field_kb(path: str, field: str) -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def thread_run_delay_s() -> float | None:
    """Seconds the calling thread has waited on a run queue for a CPU (``/proc/thread-self/schedstat``'s second
    field); None where it cannot be read."""
    try:
        return int(_text(f"{PROC}/thread-self/schedstat").split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None
