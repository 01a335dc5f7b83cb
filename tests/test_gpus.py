"""The GPU layer: what NVML (through nvidia-smi's XML) says of the devices a run used, and the rules on it.

No GPU was lent to record real logs: ``tests/data/gpu`` holds nvidia-smi logs written by hand in the layout
``nvidia-smi -q -x`` writes (each file says so), as test_hardware_rules holds /proc/stat as a VM writes it.
On this machine (no CUDA), reading the GPUs is tested for real: nothing is read, and nothing is guessed.
"""

from __future__ import annotations

import os
from pathlib import Path

from test_hardware_rules import _evidence, _findings, recorded

from advisor.machine.conditions import Watch, judge
from advisor.machine.gpus import parse_nvidia_smi_xml, read_gpus
from devkit.saved_evidence import as_cuda

GPU_LOGS = Path(__file__).parent / "data" / "gpu"
ME = os.getpid()
GPU_RULES = ("gpu-throttled", "pcie-link-degraded", "gpu-shared")


def _log(name: str, own_pid: int = ME) -> str:
    return (GPU_LOGS / f"{name}.xml").read_text().replace("{OWN_PID}", str(own_pid))


def _on_gpu(name: str, own_pid: int = ME):
    unreadable: list[str] = []
    gpus = parse_nvidia_smi_xml(_log(name, own_pid), {ME}, {"5f2b4c1e-0000-0000-0000-00000000a100"}, unreadable)
    conditions = recorded("quiet").model_copy(update={"gpus": gpus, "unreadable": unreadable})
    return as_cuda(_evidence(conditions)), gpus, unreadable


def test_a_throttled_narrow_shared_gpu_is_read_and_judged_as_contention():
    """What each GPU rule makes of it: tests/rules/test_gpu_throttled.py, test_pcie_link.py, test_gpu_shared.py."""
    evidence, gpus, unreadable = _on_gpu("throttled_narrow_shared")
    [gpu] = gpus  # GPU 1 runs nothing of the job's: not read
    assert (gpu.index, gpu.source, gpu.sm_clock_mhz, gpu.max_sm_clock_mhz) == (0, "nvidia-smi", 1005, 1410)
    assert gpu.throttle_reasons == ["software thermal slowdown"] and (gpu.pcie_width, gpu.max_pcie_width) == (8, 16)
    assert (gpu.persistence_mode, gpu.mig_mode, gpu.ecc_enabled) == (True, False, True) and unreadable == []
    assert [(p.pid, p.memory_mb) for p in gpu.others] == [(4242, 20480)]
    reasons = judge(evidence.timing.conditions)
    assert any("GPU 0 ran at 71% of its maximum SM clock" in r for r in reasons)
    assert any("GPU 0 was shared with 1 other process" in r for r in reasons)


def test_a_healthy_gpu_is_read_as_it_is_and_a_power_cap_at_full_clock_is_no_contention():
    """Each GPU rule stays silent on it: the rules' own files."""
    evidence, [gpu], _ = _on_gpu("healthy")
    assert gpu.throttle_reasons == ["software power cap"] and gpu.clock_ratio > 0.95
    assert gpu.mig_mode is None and gpu.persistence_mode is False  # N/A on a V100: not guessed
    assert judge(evidence.timing.conditions) == []


def test_in_another_pid_namespace_the_device_is_found_by_uuid_and_its_processes_are_not_judged():
    """In a container the device lists host pids: none is the job's, so nobody on it can be called another."""
    evidence, [gpu], unreadable = _on_gpu("throttled_narrow_shared", own_pid=31337)
    assert gpu.index == 0 and gpu.others == []
    assert unreadable and "another PID namespace" in unreadable[0]  # gpu-shared then: tests/rules/test_gpu_shared.py


def test_without_cuda_nothing_is_read_and_the_gpu_rules_do_not_run():
    """This machine, as it is: a CPU run reads no GPU, and the GPU rules say why they did not run."""
    unreadable: list[str] = []
    assert read_gpus({ME}, unreadable) == [] and unreadable == []
    with Watch() as watch:
        sum(range(1000))
    assert watch.conditions.gpus == []
    for slug in GPU_RULES:
        _, run = _findings(_evidence(recorded("quiet")), slug)
        assert run.status == "not run" and "CUDA" in run.why, (slug, run)
