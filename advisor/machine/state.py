"""Records of the machine while a measurement ran: other processes on its CPUs, the quota, the clocks, and
the GPUs' state. ``advisor/machine/conditions.py`` reads them; ``advisor/evidence.py`` holds them with each timing."""

from __future__ import annotations

from advisor.records import Field, Record

__all__ = ["DeviceProcess", "GpuState", "MeasurementConditions", "OtherProcess"]


class OtherProcess(Record):  # one that used this process's CPUs while it was measured
    pid: int
    command: str
    cores: float = Field(description="CPU time over the window's wall time: 1.0 is one core, all the time")


class DeviceProcess(Record):  # a process that holds a context on a GPU advisor measured on
    pid: int
    command: str
    memory_mb: float | None = None


class GpuState(Record):
    """One GPU as NVML (or nvidia-smi, which reads NVML) saw it at the end of a timed window: clocks against
    their maximum and why they are held down, the PCIe link against the device's maximum, the other processes
    on it, and the modes that change what a measurement means (``advisor/machine/gpus.py``)."""

    index: int
    name: str = ""
    source: str = Field(default="", description="nvml or nvidia-smi")
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list, description="active reasons that hold the clocks "
                                                                          "down (idle and sync boost left out)")
    pcie_gen: int | None = None
    max_pcie_gen: int | None = None
    pcie_width: int | None = None
    max_pcie_width: int | None = None
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    ecc_enabled: bool | None = None
    others: list[DeviceProcess] = Field(default_factory=list, description="processes outside the measured job")

    @property
    def clock_ratio(self) -> float | None:
        if not self.sm_clock_mhz or not self.max_sm_clock_mhz:
            return None
        return self.sm_clock_mhz / self.max_sm_clock_mhz


class MeasurementConditions(Record):
    """What else the machine did while a measurement ran (``advisor/machine/conditions.py``): the CPU time other
    processes used, steal, the cgroup quota and its throttling, the process's own CPU, the clocks."""

    wall_s: float
    cores_usable: int = Field(description="CPUs this process may run on (its affinity)")
    others_cores: float | None = Field(default=None, description="other processes' CPU time on those CPUs over "
                                                                "the wall time, in cores; None: /proc unreadable")
    steal_share: float | None = Field(default=None, description="share of those CPUs' time a hypervisor took")
    own_cores: float | None = Field(default=None, description="this process and its children: CPU over wall")
    quota_cores: float | None = Field(default=None, description="the cgroup CPU quota in cores; None: none set")
    throttled_share: float | None = Field(default=None, description="share of the quota's periods throttled")
    governor: str = Field(default="", description="CPU frequency governor; empty: not readable here")
    clock_ratio: float | None = Field(default=None, description="lowest current/max clock over those CPUs")
    busiest: list[OtherProcess] = Field(default_factory=list, description="the other processes that used most")
    gpus: list[GpuState] = Field(default_factory=list, description="the GPUs this process used, at the window's end")
    unreadable: list[str] = Field(default_factory=list, description="what could not be read here, and why")

    @property
    def others_share(self) -> float | None:
        """Other processes' CPU time as a share of this process's CPUs."""
        return None if self.others_cores is None or not self.cores_usable else self.others_cores / self.cores_usable
