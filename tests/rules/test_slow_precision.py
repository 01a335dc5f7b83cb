"""slow-precision: a step computing in a dtype this device's measured roofs put far below float32 (bf16 autocast on a
CPU that emulates bf16, float64 from NumPy), at the line that chose it, with the fix measured; silent where the
dtype runs natively. missing-amp asks the same roofs before advising bf16."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import SAMPLES, check_rule, line_of, verify_sample
from devkit.saved_evidence import saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("slow-precision")

AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}  # a CPU without native bf16, emulated


def _with_roofs(evidence, **roofs):
    peaks = evidence.peaks.model_copy(update={"flops_per_s": {**evidence.peaks.flops_per_s, **roofs}})
    return evidence.model_copy(update={"peaks": peaks})


def test_bf16_autocast_on_a_cpu_that_emulates_bf16_is_found_at_the_autocast_line():
    """gpu_style_autocast's evidence, recorded with bf16 emulated (AVX2): most of the step in bf16 at a roof far
    below float32's; the autocast call is the place, the fix is autocast off where bf16 is not native."""
    evidence = saved_evidence("gpu_style_autocast")
    assert not evidence.env.cpu_native_bf16
    [finding] = check_rule("slow-precision", evidence)
    path = SAMPLES / "gpu_style_autocast.py"
    first = finding.locations[0]
    assert (first.line, first.note) == (line_of(path, "with torch.autocast("), "autocast to bfloat16: the precision "
                                                                               "chosen here")
    assert finding.evidence["autocast"] and finding.evidence["roof_ratio"] >= 2
    assert round(finding.impact, 4) == finding.evidence["recoverable_share"] >= 0.3  # HIGH from 0.3 (high_share)
    assert "enabled=" in finding.fix.summary and "GFLOP/s against float32's" in finding.message


def test_the_same_step_against_roofs_where_bf16_is_native_is_not_slow():
    evidence = saved_evidence("gpu_style_autocast")
    native = _with_roofs(evidence, bfloat16=2 * evidence.peaks.flops_per_s["float32"])
    assert check_rule("slow-precision", native) == []
    without = evidence.model_copy(update={"peaks": evidence.peaks.model_copy(update={"flops_per_s": {
        "float32": evidence.peaks.flops_per_s["float32"]}})})
    assert check_rule("slow-precision", without) == []  # bf16 never measured here (an older cache): not judged


def test_float64_from_numpy_is_found_where_it_came_in_and_missing_amp_leaves_it_alone():
    evidence = saved_evidence("numpy_float64")
    [finding] = check_rule("slow-precision", evidence)
    path = SAMPLES / "numpy_float64.py"
    assert [loc.line for loc in finding.locations[:2]] == [line_of(path, "return model.double()"),
                                                            line_of(path, "return torch.from_numpy(features)")]
    assert "from .double() at numpy_float64.py" in finding.message
    assert finding.evidence["dtype"] == "float64" and finding.evidence["roof_ratio"] >= 1.5
    assert "torch.from_numpy(array).float()" in finding.fix.summary
    assert check_rule("missing-amp", evidence) == []  # its matmuls are not float32


def test_float64_on_a_gpu_judged_by_its_datasheet_where_its_roofs_could_not_be_measured():
    """Where measuring fails on a GPU, the datasheet's roofs stand in: a V100 runs FP64 at half its FP32 (found),
    an A100's FP64 tensor cores at its FP32 (not slow), and a GPU whose datasheet gives no FP64 is not judged."""
    from advisor.machine.peaks import MachinePeaks, published_peaks

    evidence = saved_evidence("numpy_float64")

    def on(gpu: str):
        flops, bandwidth = published_peaks(gpu)
        peaks = MachinePeaks(device=gpu, flops_per_s=flops, bandwidth_bytes_per_s=bandwidth, source="published")
        return check_rule("slow-precision", evidence.model_copy(update={"peaks": peaks}))
    [v100] = on("Tesla V100-SXM2-16GB")
    assert v100.evidence["roof_ratio"] == 2.01 and v100.evidence["roofs_source"] == "published"
    assert on("NVIDIA A100-SXM4-80GB") == [] and on("NVIDIA H100 80GB HBM3") == [] and on("Tesla T4") == []


def test_missing_amp_says_bf16_applies_elsewhere_where_the_roofs_measured_it_slower_here():
    evidence = saved_evidence("weight_norm_keywords")
    assert check_rule("missing-amp", evidence)[0].severity.value == "low"  # native bf16 measured faster here
    slow_bf16 = _with_roofs(evidence, bfloat16=evidence.peaks.flops_per_s["float32"] / 50)
    [finding] = check_rule("missing-amp", slow_bf16)
    assert finding.severity.value == "info" and "(measured), so autocast would be slower here" in finding.message


@pytest.mark.slow
def test_an_audit_on_a_cpu_that_emulates_bf16_finds_it_and_measures_autocast_off(tmp_path):
    """The whole audit in a child with bf16 emulated: the finding, and its fix measured against the baseline with
    the numerics compared (the speed is this machine's: reported, not asserted)."""
    done = subprocess.run([sys.executable, "-m", "advisor", "audit", str(SAMPLES / "gpu_style_autocast.py"), "--out",
                           str(tmp_path), "--format", "json", "--pairs", "6", "--quiet"],
                          env={**os.environ, **AVX2}, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads((tmp_path / "gpu_style_autocast.json").read_text())
    [finding] = [f for f in report["findings"] if f["slug"] == "slow-precision"]
    verification = finding["verification"]
    assert verification["samples"] == 6 and verification["status"] not in ("fix-failed", "numerics-failed")
    assert verification["max_rel_error"] <= verification["tolerance"] == 0.05
    assert report["roofs"]["flops_per_s"]["bfloat16"] * 2 < report["roofs"]["flops_per_s"]["float32"]


@pytest.mark.slow
def test_the_same_audit_where_the_cpu_runs_bf16_natively_finds_nothing(tmp_path):
    import torch

    from advisor.machine.procfs import cpu_model_and_flags
    from conftest import audit

    if not {"avx512_bf16", "amx_bf16"} & set(cpu_model_and_flags()[1]) \
            or not torch.ops.mkldnn._is_mkldnn_bf16_supported():  # the CPU's flags, and what oneDNN is let use here
        pytest.skip("bf16 is not native here (no AVX512-BF16 or AMX, or oneDNN held below them), and native bf16 "
                    "cannot be emulated")
    result = audit(SAMPLES / "gpu_style_autocast.py", tmp_path)
    assert result.evidence.env.cpu_native_bf16 and not [f for f in result.report.findings if f.slug == "slow-precision"]


@pytest.mark.slow
def test_float64_as_float32_is_measured_with_the_results_within_float32s_rounding():
    [finding] = check_rule("slow-precision", saved_evidence("numpy_float64"))
    verdict = verify_sample("numpy_float64", finding, "slow-precision", pairs=6)
    assert verdict.samples == 6 and verdict.status not in ("fix-failed", "numerics-failed"), verdict
    assert verdict.max_rel_error <= verdict.tolerance == 1e-4


@pytest.mark.slow
def test_advisor_run_of_a_gpu_style_script_on_a_cpu_that_emulates_bf16_has_the_roofs_and_the_finding(tmp_path):
    """The roofs are read in the script's process (cached, or measured once its steps are timed): the roofline
    is in the run's report, the finding at the script's autocast line, its fix switched on inside the run."""
    script = SAMPLES / "scripts" / "gpu_style_train.py"
    done = subprocess.run([sys.executable, "-m", "advisor", "run", "--out", str(tmp_path), "--format", "json",
                           "--pairs", "3", "--quiet", "--", sys.executable, str(script)],
                          env={**os.environ, **AVX2}, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads((tmp_path / "gpu_style_train.json").read_text())
    assert report["roofline"]["operators"] and report["roofs"]["flops_per_s"]["bfloat16"] > 0
    [finding] = [f for f in report["findings"] if f["slug"] == "slow-precision"]
    assert finding["locations"][0]["line"] == line_of(script, "with torch.autocast(device")
    assert finding["verification"]["status"] not in ("fix-failed", "numerics-failed"), finding["verification"]


def test_tf32_is_offered_as_a_gain_only_where_this_gpus_roofs_measured_one():
    from advisor.machine.peaks import MachinePeaks
    from advisor.rulekit.engine import load_rules, run_rules
    from devkit.saved_evidence import as_cuda

    on_gpu = as_cuda(saved_evidence("gpu_flags"))

    def tf32(roof: float):
        peaks = MachinePeaks(device="NVIDIA A100-SXM4-80GB", flops_per_s={"float32": 19e12, "tf32": roof})
        findings, _ = run_rules(load_rules(), on_gpu.model_copy(update={"peaks": peaks}))
        return next(f for f in findings if f.slug == "tf32-disabled")
    assert tf32(150e12).severity.value == "medium"  # an A100's tensor cores: 8x
    slow = tf32(19.5e12)  # measured no faster here (a clock-capped or shared GPU)
    assert slow.severity.value == "info" and "no gain here" in slow.message


def test_bf16_weights_on_an_emulating_cpu_are_found_at_the_cast_and_its_reorders_are_no_layout_finding():
    """bf16_depthwise_cnn, recorded with bf16 emulated: slow-precision at the .bfloat16() casts; the reorders oneDNN
    makes around the convolutions in a dtype it emulates are left out of non-contiguous's layout copies (the same
    trace against native roofs counts them)."""
    from advisor.rulekit.engine import load_rules, run_rules

    evidence = saved_evidence("bf16_depthwise_cnn")
    [finding] = check_rule("slow-precision", evidence)
    path = SAMPLES / "bf16_depthwise_cnn.py"
    assert [loc.line for loc in finding.locations[:2]] == [line_of(path, "return model.bfloat16()"),
                                                            line_of(path, "return images.bfloat16()")]
    assert not finding.evidence["autocast"] and "(the model's parameters)" in finding.message

    def copies(ev) -> float:
        runs = []
        run_rules(load_rules(), ev, runs=runs)
        return next(run for run in runs if run.slug == "non-contiguous").margin.value
    native = _with_roofs(evidence, bfloat16=2 * evidence.peaks.flops_per_s["float32"])
    assert copies(evidence) < copies(native)  # the emulated convolutions' reorders: not the user's layout


def test_a_dtype_named_in_a_cast_or_a_factory_is_where_bf16_came_in():
    """bf16_weights casts its model with .to(torch.bfloat16) and makes its inputs with dtype=torch.bfloat16 (recorded
    where bf16 is native: silent); against the roofs of a CPU that emulates bf16 (60x below float32's, as an AVX2
    EPYC measured 3.24 GFLOP/s against 204) the finding is placed at both, the cast first."""
    evidence = saved_evidence("bf16_weights")
    assert check_rule("slow-precision", evidence) == []
    emulated = _with_roofs(evidence, bfloat16=evidence.peaks.flops_per_s["float32"] / 60)
    [finding] = check_rule("slow-precision", emulated)
    path = SAMPLES / "bf16_weights.py"
    assert [(loc.line, loc.note) for loc in finding.locations[:2]] == [
        (line_of(path, "return model.to(torch.bfloat16)"), ".to(torch.bfloat16): where bfloat16 may come from"),
        (line_of(path, "dtype=torch.bfloat16)"), "dtype=torch.bfloat16: where bfloat16 may come from")]
    assert "(the model's parameters) from .to(torch.bfloat16) at bf16_weights.py:" in finding.message
    # closure_lstm makes its states with dtype=torch.double in its forward (4 lines) after .double() cast the model
    # and torch.from_numpy brought its data in: the casts are named first, the factories after
    from advisor.evidence import CallSite

    lstm = saved_evidence("closure_lstm")
    path = SAMPLES / "closure_lstm.py"
    states = [CallSite(api="dtype=torch.float64", file=str(path), line=line, code="", runtime=False)
              for line in range(25, 29)]
    with_states = lstm.model_copy(update={"calls": states + list(lstm.calls or [])})
    [finding] = check_rule("slow-precision", with_states)
    assert line_of(path, "return Sequence().double()") in [loc.line for loc in finding.locations[:3]]


@pytest.mark.slow
def test_bf16_weights_as_float32_are_measured_with_the_results_within_bf16s_rounding():
    [finding] = check_rule("slow-precision", saved_evidence("bf16_depthwise_cnn"))
    verdict = verify_sample("bf16_depthwise_cnn", finding, "slow-precision", pairs=4)
    assert verdict.samples == 4 and verdict.status not in ("fix-failed", "numerics-failed"), verdict
    assert verdict.max_rel_error <= verdict.tolerance == 0.05


def test_channels_last_for_convolutions_in_a_precision_this_cpu_emulates_is_said_to_apply_elsewhere():
    from advisor.machine.peaks import MachinePeaks

    evidence = saved_evidence("gpu_flags")  # NCHW convolutions: channels-last fires
    assert check_rule("channels-last", evidence)[0].severity.value == "low"
    in_bf16 = evidence.model_copy(update={"target": evidence.target.model_copy(update={"autocast": "bfloat16"})})

    def roofs(bfloat16: float):
        peaks = MachinePeaks(device="a CPU", flops_per_s={"float32": 200e9, "bfloat16": bfloat16})
        return in_bf16.model_copy(update={"peaks": peaks})
    [finding] = check_rule("channels-last", roofs(3e9))  # bf16 emulated: 60x below float32
    assert finding.severity.value == "info" and "the layout applies where it is native" in finding.message
    assert check_rule("channels-last", roofs(400e9))[0].severity.value == "low"  # native bf16: as before
