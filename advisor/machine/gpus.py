"""The GPUs' state at the end of a timed window: clocks, throttling, the PCIe link, who else is on the device.

A GPU held at 60% of its clock by a power cap or heat, a card in a slot that trains its link at x8, or a
device another job computes on, each makes a step slower than the model is, and nothing in the trace says
why. So a ``Watch`` that brackets a window on CUDA reads the devices as the window ends (the clocks and the
link still as the load left them), through NVML (``pynvml``, from the nvidia-ml-py package) where it can be
imported, else through ``nvidia-smi -q -x`` (NVML's own command-line reader), else records that the GPU
state is not readable here. Nothing is guessed.

The GPUs read are those this process's job holds a context on (its pids in the device's process list, or
the device torch names by UUID). The other processes on them are named only where the pids can be told
apart: in a container's PID namespace the device lists host pids, and then none of the job's is found.
"""

from __future__ import annotations

import sys

from advisor.machine import procfs
from advisor.machine.state import DeviceProcess, GpuState

# NVML's clocks-event (throttle) reason bits, and nvidia-smi's XML names for them
REASON_BITS = {
    0x2: "applications clocks setting", 0x4: "software power cap", 0x8: "hardware slowdown",
    0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown", 0x80: "hardware power brake",
    0x100: "display clocks setting",
}
REASON_TAGS = {
    "applications_clocks_setting": "applications clocks setting", "sw_power_cap": "software power cap",
    "hw_slowdown": "hardware slowdown", "sw_thermal_slowdown": "software thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown", "hw_power_brake_slowdown": "hardware power brake",
    "display_clocks_setting": "display clocks setting",
}
SMI_TIMEOUT_S = 10.0


def read_gpus(own_pids: set[int], unreadable: list[str]) -> list[GpuState]:
    """The GPUs the job with ``own_pids`` uses, as NVML or nvidia-smi report them; what could not be read
    goes to ``unreadable``. Only where torch has initialised CUDA in this process: a CPU run reads nothing."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return []
    uuids = _torch_uuids(torch)
    try:
        return _from_nvml(own_pids, uuids, unreadable)
    except ImportError:
        pass
    except Exception as failure:  # noqa: BLE001 - NVML raises its own NVMLError per missing feature or driver
        unreadable.append(f"GPU state: NVML failed ({type(failure).__name__}: {failure})")
        return []
    import shutil  # here: only a CUDA run reads nvidia-smi, and analyze's start-up pays for every import
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        unreadable.append("GPU state: not readable here (pynvml is not installed and nvidia-smi is not on PATH)")
        return []
    try:
        done = subprocess.run([smi, "-q", "-x"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError) as failure:
        unreadable.append(f"GPU state: nvidia-smi -q -x failed ({failure})")
        return []
    return parse_nvidia_smi_xml(done.stdout, own_pids, uuids, unreadable)


def parse_nvidia_smi_xml(text: str, own_pids: set[int], uuids: set[str], unreadable: list[str]) -> list[GpuState]:
    """The GPUs in an ``nvidia-smi -q -x`` log that the job uses (by pid, else by torch's UUIDs)."""
    import xml.etree.ElementTree as ElementTree

    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as failure:
        unreadable.append(f"GPU state: nvidia-smi's XML does not parse ({failure})")
        return []
    states = []
    for index, gpu in enumerate(root.iter("gpu")):
        pids = [(_int(p.findtext("pid")), p.findtext("process_name") or "", _quantity(p.findtext("used_memory"), "MiB"))
                for p in gpu.iter("process_info") if (p.findtext("type") or "C") != "G"]
        uuid = _bare_uuid(gpu.findtext("uuid") or "")
        if not _ours(pids, own_pids, uuid, uuids):
            continue
        reasons_node = gpu.find("clocks_event_reasons")  # nvidia-smi 535 on; earlier: clocks_throttle_reasons
        if reasons_node is None:
            reasons_node = gpu.find("clocks_throttle_reasons")
        reasons = []
        if reasons_node is not None:
            for node in reasons_node:
                tag = node.tag.removeprefix("clocks_event_reason_").removeprefix("clocks_throttle_reason_")
                if tag in REASON_TAGS and (node.text or "").strip() == "Active":
                    reasons.append(REASON_TAGS[tag])
        link = gpu.find("pci/pci_gpu_link_info")
        state = GpuState(
            index=index,  # nvidia-smi lists the GPUs in NVML's index order
            name=gpu.findtext("product_name") or "", source="nvidia-smi",
            sm_clock_mhz=_quantity(gpu.findtext("clocks/sm_clock"), "MHz"),
            max_sm_clock_mhz=_quantity(gpu.findtext("max_clocks/sm_clock"), "MHz"),
            throttle_reasons=reasons,
            pcie_gen=_int(link.findtext("pcie_gen/current_link_gen")) if link is not None else None,
            max_pcie_gen=_int(link.findtext("pcie_gen/max_link_gen")) if link is not None else None,
            pcie_width=_int(link.findtext("link_widths/current_link_width")) if link is not None else None,
            max_pcie_width=_int(link.findtext("link_widths/max_link_width")) if link is not None else None,
            persistence_mode=_enabled(gpu.findtext("persistence_mode")),
            mig_mode=_enabled(gpu.findtext("mig_mode/current_mig")),
            ecc_enabled=_enabled(gpu.findtext("ecc_mode/current_ecc")),
        )
        state.others = _others(state.index, pids, own_pids, unreadable)
        states.append(state)
    return states


def _from_nvml(own_pids: set[int], uuids: set[str], unreadable: list[str]) -> list[GpuState]:
    import pynvml  # nvidia-ml-py: present where the NVIDIA stack is installed, not a dependency of advisor

    def query(name: str, handle, *args):
        """One NVML query, None where the device or driver does not support it."""
        try:
            return getattr(pynvml, name)(handle, *args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and its siblings
            return None

    def flag(value) -> bool | None:  # a mode query returns a value, or (current, pending)
        value = value[0] if isinstance(value, (tuple, list)) else value
        return None if value is None else value == 1

    pynvml.nvmlInit()
    try:
        states = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            running = query("nvmlDeviceGetComputeRunningProcesses", handle) or []
            pids = [(p.pid, procfs.command(p.pid), (p.usedGpuMemory / 2**20) if p.usedGpuMemory else None) for p in running]
            if not _ours(pids, own_pids, _bare_uuid(_text(query("nvmlDeviceGetUUID", handle))), uuids):
                continue
            bits = query("nvmlDeviceGetCurrentClocksThrottleReasons", handle) or 0
            state = GpuState(
                index=index, name=_text(query("nvmlDeviceGetName", handle)), source="nvml",
                sm_clock_mhz=query("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_SM),
                max_sm_clock_mhz=query("nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_SM),
                throttle_reasons=[name for bit, name in REASON_BITS.items() if bits & bit],
                pcie_gen=query("nvmlDeviceGetCurrPcieLinkGeneration", handle),
                max_pcie_gen=query("nvmlDeviceGetMaxPcieLinkGeneration", handle),
                pcie_width=query("nvmlDeviceGetCurrPcieLinkWidth", handle),
                max_pcie_width=query("nvmlDeviceGetMaxPcieLinkWidth", handle),
                persistence_mode=flag(query("nvmlDeviceGetPersistenceMode", handle)),
                mig_mode=flag(query("nvmlDeviceGetMigMode", handle)),
                ecc_enabled=flag(query("nvmlDeviceGetEccMode", handle)),
            )
            state.others = _others(index, pids, own_pids, unreadable)
            states.append(state)
        return states
    finally:
        pynvml.nvmlShutdown()


def _ours(pids: list[tuple], own_pids: set[int], uuid: str, uuids: set[str]) -> bool:
    return any(pid in own_pids for pid, _, _ in pids) or (bool(uuid) and uuid in uuids)


def _others(index: int, pids: list[tuple], own_pids: set[int], unreadable: list[str]) -> list[DeviceProcess]:
    if pids and not any(pid in own_pids for pid, _, _ in pids):
        unreadable.append(f"GPU {index}'s other processes: its process list holds none of this job's pids "
                          "(another PID namespace, as in a container), so they cannot be told apart")
        return []
    return [DeviceProcess(pid=pid, command=command, memory_mb=None if memory is None else round(memory, 1))
            for pid, command, memory in pids if pid is not None and pid not in own_pids]


def _torch_uuids(torch) -> set[str]:
    found = set()
    for index in range(torch.cuda.device_count()):
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            found.add(_bare_uuid(str(uuid)))
    return found


def _bare_uuid(text: str) -> str:
    return text.strip().lower().removeprefix("gpu-")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def _int(text: str | None) -> int | None:
    digits = (text or "").strip().rstrip("x")
    return int(digits) if digits.isdigit() else None


def _quantity(text: str | None, unit: str) -> float | None:
    """``"1410 MHz"`` -> 1410.0 for unit MHz; None for "N/A" or another unit."""
    parts = (text or "").split()
    try:
        return float(parts[0]) if len(parts) == 2 and parts[1] == unit else None
    except ValueError:
        return None


def _enabled(text: str | None) -> bool | None:
    value = (text or "").strip()
    return {"Enabled": True, "Disabled": False}.get(value)

