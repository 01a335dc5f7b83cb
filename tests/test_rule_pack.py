"""The wider rule pack: anomaly-detection, train-mode-inference, conv-bias-before-bn."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import EXPECTED

from advisor.rulekit.rule import Severity
from conftest import slugs, verify_sample

HEALTHY = ("clean_mlp", "bf16_weights", "train_with_loader")


@pytest.mark.slow
@pytest.mark.parametrize("sample", HEALTHY)
def test_healthy_samples_get_no_finding_from_any_rule(sample_audit, sample):
    """Nothing, but what this CPU calls for: a sample computing in bfloat16 is slow where the CPU emulates it
    (slow-precision, at the line that chose the dtype; '# expect where bf16 is emulated')."""
    result = sample_audit(sample)
    wanted = EXPECTED[sample].fires_for(result.evidence)
    assert {f.slug for f in result.report.findings} == wanted, result.report.findings
    for slug, lines in EXPECTED[sample].lines.items():
        if slug in wanted:
            assert lines <= {loc.line for f in result.report.findings if f.slug == slug for loc in f.locations}


@pytest.mark.slow
def test_anomaly_detection_left_on_is_high_in_training_and_its_fix_is_measured(sample_audit):
    result = sample_audit("anomaly_left_on")
    [finding] = [f for f in result.report.findings if f.slug == "anomaly-detection"]
    assert finding.severity == Severity.HIGH and result.evidence.env.anomaly_detection
    verdict = verify_sample("anomaly_left_on", finding, "anomaly-detection")
    # same math, no bookkeeping; the gain is clear on a quiet machine (verified), lost in the noise under a CPU hog
    assert verdict.status in ("verified", "no-gain", "inconclusive") and verdict.max_rel_error <= 1e-6, verdict
    assert "anomaly-detection" not in slugs(sample_audit("train_with_loader"))


@pytest.mark.slow
def test_a_model_left_in_training_mode_for_inference(sample_audit):
    result = sample_audit("forgot_eval")
    [finding] = [f for f in result.report.findings if f.slug == "train-mode-inference"]
    assert finding.evidence["kinds"] == {"BatchNorm1d": 1, "Dropout": 1}
    assert "model.eval()" in finding.fix.summary
    # negatives: eval() models, and a train-mode model without Dropout/BatchNorm (host_sync's GatedMLP)
    assert result.evidence.target.training_flag is True
    for sample in ("missing_amp", "host_sync"):
        assert "train-mode-inference" not in slugs(sample_audit(sample))


@pytest.mark.slow
def test_conv_bias_before_batchnorm_and_the_exact_fold(sample_audit):
    result = sample_audit("conv_bias_bn")
    [finding] = [f for f in result.report.findings if f.slug == "conv-bias-before-bn"]
    assert finding.evidence["pairs"] == ["0.0 -> 0.1", "1.0 -> 1.1"]
    assert [loc.label() for loc in finding.locations] == ["in module 0.0", "in module 1.0"]  # no user frame here
    verdict = verify_sample("conv_bias_bn", finding, "conv-bias-before-bn")
    assert verdict.status != "numerics-failed" and verdict.max_rel_error <= 1e-4  # the fold is exact
    assert "conv-bias-before-bn" not in slugs(sample_audit("resnet_style"))  # bias=False already
    assert "conv-bias-before-bn" not in slugs(sample_audit("dataloader_workers"))  # conv -> ReLU, no BN
