"""kernel-storm (ADV103): Small-kernel storm: the step is many tiny operators, bound by dispatch or launch
overhead. Its cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_analyze import _findings

from advisor.evidence import Evidence, TargetInfo
from advisor.rulekit.engine import load_rules, run_rules
from advisor.trace.parse import parse_trace
from conftest import SAMPLES, line_of, shared_trace, verify_sample
from devkit.saved_evidence import saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("kernel-storm")


@pytest.mark.slow
def test_kernel_storm_fix_torch_compile_is_measured_on_cpu():
    finding = _storm(saved_evidence("activation_chain"))
    verdict = verify_sample("activation_chain", finding, "kernel-storm")
    assert verdict.max_rel_error is not None and verdict.compile_s is not None  # compiled, run, compared
    if verdict.status == "numerics-failed":
        # seen with inductor forced to its AVX2 code path on an AVX-512 machine: the compiled chain
        # returned NaN; advisor must then refuse to time it, whatever the speed
        assert verdict.speedup is None and "outputs differ" in verdict.note
    else:
        assert verdict.speedup is not None and verdict.samples > 0 and verdict.max_rel_error <= 1e-4


def test_launch_bound_gpu_trace_is_flagged_and_a_busy_gpu_is_not():
    rules = load_rules()
    small = parse_trace(str(shared_trace("with_gpu_user_annotation/step_based_trace_2543932.json.gz")))
    findings, _ = run_rules(rules, Evidence(target=TargetInfo(model_file="r", device="cuda"), trace=small))
    [storm] = [f for f in findings if f.slug == "kernel-storm"]
    assert storm.evidence["kernels_per_step"] == 130 and storm.evidence["short_kernel_share"] == 1.0
    busy = parse_trace(str(shared_trace("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")))
    findings, _ = run_rules(rules, Evidence(target=TargetInfo(model_file="r", device="cuda"), trace=busy))
    assert not [f for f in findings if f.slug == "kernel-storm"]  # ResNet DDP: GPU busy, large kernels


def test_kernel_storm_reports_launch_delays_on_a_launch_bound_trace():
    storm = _findings("with_gpu_user_annotation/step_based_trace_2543932.json.gz")["kernel-storm"]
    assert storm.evidence["launch_delay_us_p90"] >= storm.evidence["launch_delay_us_p50"] > 0
    assert 0 < storm.evidence["launch_slower_than_kernel_share"] <= 1


def _storm(evidence):
    found = [f for f in run_rules(load_rules(), evidence)[0] if f.slug == "kernel-storm"]
    return found[0] if found else None


def test_kernel_storm_reports_the_loop_the_overhead_share_and_the_gpu_launch_cost():
    finding = _storm(saved_evidence("kernel_storm"))
    evidence = finding.evidence
    assert evidence["dispatch_share_of_step"] >= 0.15 and evidence["dispatch_overhead_us"] > 0
    assert evidence["work_share_of_step"] <= 0.75
    assert evidence["gpu_launch_ms_estimate"] == pytest.approx(evidence["ops_per_step"] * 5 / 1000, abs=1e-3)
    assert "kernel launches" in finding.message and "assumed 5 µs" in finding.message
    assert finding.impact == pytest.approx(evidence["dispatch_share_of_step"], abs=1e-3)
    assert "torch.compile" in finding.fix.summary and "vectorize" in finding.fix.summary
    assert "nn.GRU / nn.LSTM" in finding.fix.summary  # its loop is a gated (LSTM-style) cell
    assert finding.locations[0].count_per_step >= 64  # the loop body line runs per time step


def test_a_short_hand_written_activation_chain_is_a_storm():
    finding = _storm(saved_evidence("activation_chain"))
    assert finding is not None and finding.evidence["ops_per_step"] < 200  # the old fixed count missed it
    assert line_of(SAMPLES / "activation_chain.py", "QUICK GELU LINE") in {loc.line for loc in finding.locations}


def test_a_step_that_already_runs_compiled_code_is_no_storm_on_cpu():
    """The same recorded storm, but its step holds a region torch.compile made: the fusing is done, and what
    dispatch remains is the compiled code's own calls (activation_chain's torch.compile patch, re-audited)."""
    import copy
    import dataclasses

    evidence = saved_evidence("activation_chain").model_copy()
    assert _storm(evidence) is not None
    trace = copy.deepcopy(evidence.trace)
    first = trace.step_ops()[0]
    trace.ops.append(dataclasses.replace(first, name="Torch-Compiled Region: 0/0"))
    assert _storm(evidence.model_copy(update={"trace": trace})) is None


def test_a_gru_cell_looped_over_time_is_a_storm_advised_nn_gru():
    finding = _storm(saved_evidence("recurrent_cell"))
    assert finding is not None and "nn.GRU" in finding.fix.summary
    assert all("torch" not in loc.file.split("/")[-2:][0] for loc in finding.locations)  # user lines only
    assert line_of(SAMPLES / "recurrent_cell.py", "BLEND LINE") in {loc.line for loc in finding.locations}


def test_a_step_that_its_flops_and_bytes_explain_is_no_storm():
    evidence = saved_evidence("kernel_storm")
    heavy = evidence.flops.model_copy(update={"total": int(evidence.env.matmul_gflops * 1e9 * evidence.step_ms / 1000)})
    assert _storm(evidence.model_copy(update={"flops": heavy})) is None  # the FLOPs alone fill the step
    quiet = evidence.env.model_copy(update={"dispatch_overhead_us": evidence.env.dispatch_overhead_us / 4})
    assert _storm(evidence.model_copy(update={"env": quiet})) is None  # overhead below 15% of the step


def test_without_a_measured_floor_the_mean_operator_time_decides():
    evidence = saved_evidence("kernel_storm")
    unmeasured = evidence.env.model_copy(update={"dispatch_overhead_us": None})
    finding = _storm(evidence.model_copy(update={"env": unmeasured}))
    assert finding is not None and "dispatch_share_of_step" not in finding.evidence


def test_healthy_and_big_operator_models_are_no_storm():
    for sample in ("clean_mlp", "resnet_style", "gpt_block", "manual_attention", "host_sync", "moe_skewed"):
        assert _storm(saved_evidence(sample)) is None, sample
