"""missing-amp (ADV104): Matmul-heavy step in fp32 without autocast (missing mixed precision). Its cases: the
bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import fired, only

from advisor.rulekit.rule import Severity
from devkit.saved_evidence import as_device, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("missing-amp")


@pytest.mark.slow
def test_missing_amp_stays_silent_under_autocast_and_for_sliver_matmuls(sample_audit):
    assert not [f for f in sample_audit("clean_mlp").report.findings if f.slug == "missing-amp"]  # autocast
    assert not [f for f in sample_audit("bf16_weights").report.findings if f.slug == "missing-amp"]  # bf16 params
    assert not [f for f in sample_audit("moe_layer").report.findings if f.slug == "missing-amp"]  # 4-MFLOP experts


def test_missing_amp_is_device_aware_and_silent_under_autocast():
    evidence = saved_evidence("missing_amp")
    ampere = only(as_device(evidence, "cuda", gpu_capability=(8, 0)), "missing-amp")
    assert ampere.severity == Severity.HIGH and "bfloat16" in ampere.fix.summary
    volta = only(as_device(evidence, "cuda", gpu_capability=(7, 0)), "missing-amp")
    assert "float16" in volta.fix.summary and "bfloat16" not in volta.fix.summary
    no_bf16 = only(as_device(evidence, "cpu", cpu_native_bf16=False), "missing-amp")
    assert no_bf16.severity == Severity.INFO and "applies when the model runs on a GPU" in no_bf16.message
    native = only(as_device(evidence, "cpu", cpu_native_bf16=True), "missing-amp")
    assert native.severity == Severity.LOW and "measure it" in native.message
    under_autocast = evidence.model_copy(update={"target": evidence.target.model_copy(update={"autocast": "bfloat16"})})
    assert "missing-amp" not in fired(under_autocast)
    assert saved_evidence("clean_mlp").target.autocast == "bfloat16"  # capture saw the user's autocast


def test_missing_amp_fp16_training_fix_uses_grad_scaler():
    finding = only(as_device(saved_evidence("resnet_style"), "cuda", gpu_capability=(7, 5)), "missing-amp")
    assert "GradScaler" in finding.fix.after
