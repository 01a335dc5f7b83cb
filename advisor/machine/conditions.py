"""The machine's conditions during a measurement: what else used this process's CPUs, and what limited them.

A number measured while another job holds a core is not the model's number: OpenMP's threads wait for the
stolen core at every operator, and a step can take many times as long. So every timed window (the audit's
timing, each verification pair series, the timed steps of ``advisor run``) is bracketed by a ``Watch``,
which reads, at its start and its end:

- ``/proc/stat``, per CPU this process may run on (its affinity): the busy time of those CPUs, less this
  process's and its children's own (``/proc/PID/stat``), is other processes' use of them; their steal time
  is a hypervisor's;
- every process's CPU time, to name the other processes that used the most;
- the cgroup's CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``) and its throttled periods;
- the frequency governor and the current against the maximum clock (``/sys/devices/system/cpu``);
- on CUDA, at the end, the GPUs the job uses: clocks and throttle reasons, the PCIe link, the other processes
  on the device, persistence, MIG and ECC (``advisor/machine/gpus.py``).

What cannot be read here (no /proc, no cpufreq in a container) is named in ``unreadable``, never guessed.
``judge`` says whether the figures allow a measurement to be trusted, with one threshold per figure.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

from advisor.machine import procfs
from advisor.machine.gpus import read_gpus
from advisor.machine.state import MeasurementConditions, OtherProcess

BUSY_SHARE = 0.10  # other processes' CPU time of 10% of this process's CPUs: contended
STEAL_SHARE = 0.05
THROTTLED_SHARE = 0.05
LOW_CLOCK_RATIO = 0.7  # a clock held under 70% of its maximum
GPU_LOW_CLOCK_RATIO = 0.85  # a GPU's SM clock under 85% of its maximum, with a throttle reason active
NAMED_MOST = 3
NAMED_FROM_CORES = 0.05  # a process that used less than 5% of a core is not named

_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def share_resolution(wall_s: float) -> float:
    """How far a CPU share read from two /proc readings ``wall_s`` apart can be off: the kernel counts CPU time
    in whole ticks, so each CPU's (and each process's) count may be a tick short at either reading."""
    return 2 * _TICK_S / max(wall_s, 1e-9)


# The shortest window whose CPU shares can be read: their error under half the busy threshold. A shorter one
# (a script's few timed steps of a millisecond) has its shares left unread, never guessed from a tick or two:
# one tick over 2.7 ms reads as 3.7 cores.
MIN_WINDOW_S = 4 * _TICK_S / BUSY_SHARE
_CPUFREQ = "/sys/devices/system/cpu/cpu{}/cpufreq/{}"


@dataclass
class _Snapshot:
    at: float
    cpus: dict[int, list[int]] | None  # per CPU: user nice system idle iowait irq softirq steal (ticks)
    processes: dict[int, tuple[int, int, int, int]]  # pid -> (parent, group, CPU ticks, reaped children's ticks)
    throttle: tuple[int, int] | None  # (periods, throttled periods) of the cgroup's quota
    unreadable: list[str] = field(default_factory=list)


class Watch:
    """``with Watch() as watch: ...`` then ``watch.conditions``: the machine over the block; or ``start()``
    and ``stop()`` where the window spans calls (the timed steps of a script)."""

    def __init__(self, readable: bool = False) -> None:
        """``readable``: a block shorter than ``MIN_WINDOW_S`` is watched on, idle, until its shares can be read
        (verification's pairs of a fast step take a fifth of a second, too short for /proc's ticks); what
        ran beside it just after is the best reading of what ran beside it."""
        self.conditions: MeasurementConditions | None = None
        self.readable = readable
        self._usable = _usable_cpus()
        self._start: _Snapshot | None = None
        self._began = 0.0

    def start(self) -> None:
        self._start, self._began = _snapshot(), time.monotonic()

    def stop(self) -> None:
        if self._start is not None:
            if self.readable and (short := MIN_WINDOW_S - (time.monotonic() - self._began)) > 0:
                time.sleep(short)
            end = _snapshot()
            self.conditions = between(self._start, end, self._usable)
            self.conditions.gpus = read_gpus(_family(os.getpid(), end.processes), self.conditions.unreadable)
            self._start = None

    def __enter__(self) -> "Watch":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def between(start: _Snapshot, end: _Snapshot, usable: list[int]) -> MeasurementConditions:
    """The conditions from two readings of the machine, over the CPUs ``usable``."""
    wall = max(end.at - start.at, 1e-9)
    conditions = MeasurementConditions(wall_s=round(wall, 4), cores_usable=len(usable),
                                       unreadable=sorted(set(start.unreadable + end.unreadable)))
    mine = _family(os.getpid(), end.processes) | _family(os.getpid(), start.processes)
    used = {pid: ticks - start.processes[pid][2] for pid, (_, _, ticks, _) in end.processes.items()
            if pid in start.processes}
    reaped = sum(end.processes[pid][3] - start.processes[pid][3] for pid in mine  # workers that ended meanwhile
                 if pid in end.processes and pid in start.processes)
    own_s = (sum(used.get(pid, 0) for pid in mine) + reaped) * _TICK_S
    conditions.quota_cores = _quota_cores()
    if start.throttle is not None and end.throttle is not None:
        periods = end.throttle[0] - start.throttle[0]
        conditions.throttled_share = round((end.throttle[1] - start.throttle[1]) / periods, 4) if periods > 0 else 0.0
    conditions.governor, conditions.clock_ratio = _clocks(usable, conditions.unreadable)
    if wall < MIN_WINDOW_S:
        conditions.unreadable.append(
            f"the CPU shares: the window lasted {wall * 1000:.3g} ms, and /proc counts CPU time in ticks of "
            f"{_TICK_S * 1000:g} ms, so a share needs a window of {MIN_WINDOW_S:g} s to be read within "
            f"{BUSY_SHARE / 2:.0%}")
        return conditions
    conditions.own_cores = round(own_s / wall, 3) if end.processes else None
    if start.cpus is not None and end.cpus is not None:
        busy = total = steal = 0
        for cpu in usable:
            before, after = start.cpus.get(cpu), end.cpus.get(cpu)
            if before is None or after is None:
                continue
            delta = [b - a for a, b in zip(before, after)]
            busy += delta[0] + delta[1] + delta[2] + delta[5] + delta[6]
            steal += delta[7]
            total += sum(delta)
        conditions.others_cores = round(max(0.0, busy * _TICK_S - own_s) / wall, 3)
        conditions.steal_share = round(steal / total, 4) if total else 0.0
    others = sorted(((ticks, pid) for pid, ticks in used.items() if pid not in mine and ticks > 0), reverse=True)
    conditions.busiest = [OtherProcess(pid=pid, command=procfs.command(pid), cores=round(ticks * _TICK_S / wall, 3))
                          for ticks, pid in others[:NAMED_MOST] if ticks * _TICK_S / wall >= NAMED_FROM_CORES]
    return conditions


def judge(conditions: MeasurementConditions | None) -> list[str]:
    """Why a measurement taken under these conditions may not be the model's own number; empty: quiet."""
    if conditions is None:
        return []
    reasons = []
    share = conditions.others_share
    if share is not None and share >= BUSY_SHARE:
        named = ", ".join(f"{p.command} (pid {p.pid}, {p.cores:.2f} cores)" for p in conditions.busiest)
        reasons.append(f"other processes used {conditions.others_cores:.2f} of this process's "
                       f"{conditions.cores_usable} CPUs ({share:.0%})" + (f": {named}" if named else ""))
    if conditions.steal_share is not None and conditions.steal_share >= STEAL_SHARE:
        reasons.append(f"the hypervisor stole {conditions.steal_share:.0%} of the CPUs' time")
    if conditions.throttled_share is not None and conditions.throttled_share >= THROTTLED_SHARE:
        reasons.append(f"the cgroup's CPU quota ({conditions.quota_cores:g} cores) throttled "
                       f"{conditions.throttled_share:.0%} of its periods")
    if conditions.clock_ratio is not None and conditions.clock_ratio < LOW_CLOCK_RATIO:
        reasons.append(f"a CPU ran at {conditions.clock_ratio:.0%} of its maximum clock"
                       + (f" (governor {conditions.governor})" if conditions.governor else ""))
    for gpu in conditions.gpus:
        ratio = gpu.clock_ratio
        if ratio is not None and ratio < GPU_LOW_CLOCK_RATIO and gpu.throttle_reasons:
            reasons.append(f"GPU {gpu.index} ran at {ratio:.0%} of its maximum SM clock "
                           f"({', '.join(gpu.throttle_reasons)})")
        if gpu.others:
            reasons.append(f"GPU {gpu.index} was shared with {len(gpu.others)} other process(es): "
                           + ", ".join(f"{p.command or '?'} (pid {p.pid})" for p in gpu.others))
    return reasons


# How long an audit waits, once its timed steps ran contended, for the contention to pass before it times
# them again (0: never waits). ``ADVISOR_WAIT_FOR_QUIET`` sets it for every run started from a shell, as a
# CI job on a shared runner would (and the suite does: its machine may be busy all along).
WAIT_FOR_QUIET_S = 15.0
WAIT_FOR_QUIET_ENV = "ADVISOR_WAIT_FOR_QUIET"


def quiet_wait_s() -> float:
    value = os.environ.get(WAIT_FOR_QUIET_ENV, "")
    try:
        return max(0.0, float(value)) if value else WAIT_FOR_QUIET_S
    except ValueError:
        return WAIT_FOR_QUIET_S


def wait_for_quiet(limit_s: float, on_poll: Callable[[list[str]], None] = lambda reasons: None) -> float | None:
    """Watch the machine in windows just long enough to read its shares until one is quiet: the seconds that
    took, or None when ``limit_s`` ran out first. ``on_poll`` hears what each busy window saw."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        with Watch() as watch:
            time.sleep(MIN_WINDOW_S)
        reasons = judge(watch.conditions)
        if not reasons:
            return round(time.monotonic() - started, 2)
        on_poll(reasons)
    return None


# --- reading the machine ---------------------------------------------------------------------------

def _snapshot() -> _Snapshot:
    unreadable: list[str] = []
    return _Snapshot(at=time.monotonic(), cpus=_cpu_ticks(unreadable), processes=_process_ticks(unreadable),
                     throttle=_throttle(), unreadable=unreadable)


def _usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _cpu_ticks(unreadable: list[str]) -> dict[int, list[int]] | None:
    try:
        return procfs.cpu_ticks()
    except OSError as error:
        unreadable.append(f"/proc/stat ({error.strerror}): other processes' use of the CPUs")
        return None


def _process_ticks(unreadable: list[str]) -> dict[int, tuple[int, int, int, int]]:
    try:
        pids = procfs.process_ids()
    except OSError as error:
        unreadable.append(f"/proc ({error.strerror}): the processes' CPU time")
        return {}
    return {pid: times for pid in pids if (times := procfs.process_times(pid)) is not None}


# Set by advisor in the environment of a child it starts in a session of its own: that process group is the
# job's (torchrun's ranks), not a shell's or a test runner's, whose other members are other jobs.
OWN_GROUP_ENV = "ADVISOR_OWN_GROUP"


def _family(root: int, processes: dict[int, tuple[int, int, int, int]]) -> set[int]:
    """The job's own processes: ``root``, its process group where that group is the job's (it leads it, or
    advisor started the group for this job: torchrun's ranks, the script advisor started) and every
    descendant of those (a loader's workers). Another job is anything else: the Python API's caller shares a
    group with whatever its shell or test runner started beside it."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    group = processes[root][1] if root in processes else None
    if group != root and os.environ.get(OWN_GROUP_ENV) != "1":
        group = None
    found = {root} | {pid for pid, (_, pgid, _, _) in processes.items() if group is not None and pgid == group}
    pending = list(found)
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _cgroup_dirs(controller: str) -> list[str]:
    """This process's cgroup folders for ``controller``, innermost first (a quota binds from any ancestor)."""
    memberships, mounts = procfs.cgroup_memberships(), procfs.mounts()
    found = []
    for controllers, path in memberships:
        v2 = controllers == ""  # the unified hierarchy: one line "0::/path"
        for mount in mounts:
            if len(mount) < 4 or mount[2] != ("cgroup2" if v2 else "cgroup"):
                continue
            if not v2 and not (controller in controllers.split(",") and controller in mount[3].split(",")):
                continue
            folder, top = os.path.normpath(os.path.join(mount[1], path.lstrip("/"))), os.path.normpath(mount[1])
            while folder.startswith(top):
                found.append(folder)
                if folder == top:
                    break
                folder = os.path.dirname(folder)
    return found


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _quota_cores() -> float | None:
    """The tightest CPU quota over this process's cgroup and its ancestors, in cores."""
    tightest = _tightest_quota()
    return round(tightest[0], 3) if tightest else None


def _tightest_quota() -> tuple[float, str] | None:
    """(cores, folder) of the tightest quota over this process's cgroup and its ancestors."""
    quotas = []
    for folder in _cgroup_dirs("cpu"):
        if (v2 := _read(os.path.join(folder, "cpu.max"))) is not None:
            limit, _, period = v2.partition(" ")
            if limit != "max" and limit.isdigit() and period.isdigit() and int(period):
                quotas.append((int(limit) / int(period), folder))
        quota, period = _read(os.path.join(folder, "cpu.cfs_quota_us")), _read(os.path.join(folder, "cpu.cfs_period_us"))
        if quota and period and quota.lstrip("-").isdigit() and int(quota) > 0 and period.isdigit() and int(period):
            quotas.append((int(quota) / int(period), folder))
    return min(quotas) if quotas else None


def cgroup_memory_room() -> int | None:
    """Bytes the process's cgroup (or an ancestor's, the tightest) may still allocate under its memory limit (v2
    ``memory.max`` less ``memory.current``, v1 ``memory.limit_in_bytes`` less ``memory.usage_in_bytes``); None
    where no limit binds."""
    rooms = []
    for folder in _cgroup_dirs("memory"):
        for limit_file, usage_file in (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")):
            limit, usage = _read(os.path.join(folder, limit_file)), _read(os.path.join(folder, usage_file))
            if limit and limit.isdigit() and usage and usage.isdigit() and int(limit) < 2**60:  # v1's "no limit"
                rooms.append(max(0, int(limit) - int(usage)))
    return min(rooms) if rooms else None


def _throttle() -> tuple[int, int] | None:
    """(periods, throttled periods) of the folder whose quota binds: read there at the start and the end (a
    fresh cgroup's 0 periods are a reading too)."""
    tightest = _tightest_quota()
    text = _read(os.path.join(tightest[1], "cpu.stat")) if tightest else None
    if not text:
        return None
    stat = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    if "nr_periods" not in stat or "nr_throttled" not in stat:
        return None
    return int(stat["nr_periods"]), int(stat["nr_throttled"])


def _clocks(usable: list[int], unreadable: list[str]) -> tuple[str, float | None]:
    governor = _read(_CPUFREQ.format(usable[0], "scaling_governor")) if usable else None
    ratios = []
    for cpu in usable:
        current, most = _read(_CPUFREQ.format(cpu, "scaling_cur_freq")), _read(_CPUFREQ.format(cpu, "cpuinfo_max_freq"))
        if current and most and current.isdigit() and most.isdigit() and int(most):
            ratios.append(int(current) / int(most))
    if governor is None and not ratios:
        unreadable.append("cpufreq (not exposed here): the CPUs' governor and clocks")
    return governor or "", (round(min(ratios), 3) if ratios else None)
