"""gpu-shared (ADV142): Another process computes on the GPU this run measured on. Its cases: the bundled samples'
saved evidence replayed, then its own."""

from __future__ import annotations

from test_gpus import _on_gpu
from test_hardware_rules import _findings

from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("gpu-shared")


def test_another_process_on_the_jobs_gpu_is_named_with_its_memory():
    evidence, _, _ = _on_gpu("throttled_narrow_shared")
    [shared], _ = _findings(evidence, "gpu-shared")
    assert "pid 4242, 20480 MiB" in shared.message and "notebook_kernel" in shared.message


def test_a_gpu_the_job_has_to_itself_is_silent():
    evidence, _, _ = _on_gpu("healthy")
    found, run = _findings(evidence, "gpu-shared")
    assert found == [] and run.status == "silent"


def test_in_another_pid_namespace_no_process_is_called_another():
    """In a container the device lists host pids: none is the job's, so nobody on it can be called another."""
    evidence, _, _ = _on_gpu("throttled_narrow_shared", own_pid=31337)
    assert _findings(evidence, "gpu-shared")[0] == []
