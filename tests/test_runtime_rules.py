"""What several runtime rules read together: the library settings a CPU audit recorded, judged as they are (not
applicable here) and with the device recorded as a GPU; the calls watched in the step; the loaders. Each rule's own
cases are in tests/rules/.
"""

from __future__ import annotations

import pytest

from conftest import (
    check_rule,
    only_finding,
    slugs,
)
from devkit.saved_evidence import as_cuda

# --- CUDA library settings ----------------------------------------------------------------------

@pytest.mark.slow
def test_library_flags_are_recorded_but_not_judged_on_cpu(sample_audit):
    result = sample_audit("gpu_flags")
    env = result.evidence.env
    assert env.deterministic_algorithms is True and env.cudnn_benchmark is False
    assert env.float32_matmul_precision == "highest"
    assert not slugs(result) & {"deterministic-algorithms", "cudnn-benchmark", "tf32-disabled"}


@pytest.mark.slow
def test_the_same_settings_on_a_gpu_are_reported(sample_audit):
    evidence = as_cuda(sample_audit("gpu_flags").evidence)
    [benchmark] = check_rule("cudnn-benchmark", evidence)
    assert benchmark.evidence["convolutions"] == 1
    [deterministic] = check_rule("deterministic-algorithms", evidence)
    assert deterministic.evidence["deterministic_algorithms"] is True
    [tf32] = check_rule("tf32-disabled", evidence.model_copy(update={"trace": None}))  # the live settings path
    assert tf32.evidence["fp32_matmuls"] == 1
    # negatives: the flags set the fast way, a GPU older than Ampere, and a model without convolutions
    fast = as_cuda(sample_audit("gpu_flags").evidence, cudnn_benchmark=True, deterministic_algorithms=False,
                    float32_matmul_precision="high", tf32_matmul=True)
    assert check_rule("cudnn-benchmark", fast) == [] and check_rule("deterministic-algorithms", fast) == []
    assert check_rule("tf32-disabled", fast.model_copy(update={"trace": None})) == []
    volta = as_cuda(sample_audit("gpu_flags").evidence, gpu_capability=(7, 0))
    assert check_rule("tf32-disabled", volta.model_copy(update={"trace": None})) == []
    assert check_rule("cudnn-benchmark", as_cuda(sample_audit("clean_mlp").evidence, cudnn_benchmark=False)) == []


# --- calls watched in the step ------------------------------------------------------------------


@pytest.mark.slow
def test_advisors_own_zero_grad_and_healthy_steps_record_no_calls(sample_audit):
    assert sample_audit("train_with_loader").evidence.calls == []  # the harness's zero_grad() is not the user's


# --- threads, workers, wrappers, optimizers -----------------------------------------------------


@pytest.mark.slow
def test_more_loader_workers_than_cores(sample_audit):
    result = sample_audit("many_workers")
    finding = only_finding(result, "dataloader-too-many-workers")
    cores = result.evidence.env.cpu_cores_available
    assert finding.evidence["num_workers"] == cores + 2 and finding.evidence["suggested_workers"] == cores
    assert "cpu-threads" not in slugs(result)  # the same cause is reported once
    for sample in ("dataloader_workers", "audio_loader", "train_with_loader"):
        assert "dataloader-too-many-workers" not in slugs(sample_audit(sample))
