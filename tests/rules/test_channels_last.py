"""channels-last (ADV117): A convolutional network run in NCHW where channels_last (NHWC) is faster. Its cases: the
bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import only

from advisor.rulekit.rule import Severity
from conftest import audit, share_finding, slugs, write_model
from devkit.saved_evidence import as_cuda, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("channels-last")


@pytest.mark.slow
def test_nchw_conv_nets_get_channels_last(sample_audit):
    assert "channels-last" not in slugs(sample_audit("conformer_conv"))  # Conv1d: no channels_last for 3-D
    finding = share_finding(sample_audit("conv_bias_bn"), "channels-last")
    if finding is None:
        return  # measured beside another job: silent, and marked unreliable (share_finding)
    assert finding.evidence["nchw_conv_layers"] == 2 and finding.evidence["conv_share_of_step"] >= 0.25
    assert finding.severity == Severity.LOW  # a CPU run: the verification measures the gain


@pytest.mark.slow
def test_a_conv_net_already_in_channels_last_is_left_alone(tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch import nn
        def get_model():
            net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1))
            return net.eval().to(memory_format=torch.channels_last)
        def get_inputs():
            return torch.randn(8, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    """)
    result = audit(path, tmp_path)
    assert result.evidence.graph is not None and "channels-last" not in slugs(result)


def test_channels_last_severity_follows_the_device_and_precision():
    evidence = saved_evidence("conv_bias_bn")
    assert only(evidence, "channels-last").severity == Severity.LOW  # CPU: measured, not promised
    fp32_gpu = only(as_cuda(evidence), "channels-last")
    assert fp32_gpu.evidence["low_precision"] is False
    amp = as_cuda(evidence).model_copy(update={
        "target": as_cuda(evidence).target.model_copy(update={"autocast": "bfloat16"})})
    half_gpu = only(amp, "channels-last")
    assert half_gpu.severity == Severity.MEDIUM and half_gpu.evidence["low_precision"] is True
