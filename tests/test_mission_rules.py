"""The mission rules on the bundled samples: each positive fires at the right lines, every
other rule stays silent; then the device-aware and threshold paths of each rule."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import EXPECTED

from advisor.evidence import DataLoaderInfo, Evidence, TargetInfo
from advisor.rulekit.engine import load_rules, parse_settings, run_rules
from advisor.rulekit.rule import Severity
from advisor.trace.parse import parse_trace
from conftest import SAMPLES, audit, line_of, share_finding, shared_trace, verify_sample, write_model
from devkit.saved_evidence import as_device, saved_evidence


@pytest.mark.slow
@pytest.mark.parametrize("sample", sorted(EXPECTED))
def test_a_live_audit_decides_each_rule_as_its_own_measurement_says(sample_audit, sample):
    """What a live audit can always be held to, on any machine, quiet or loaded: the evidence is gathered; a
    rule decided without a measured share (a structural finding) fires exactly as the sample expects; a
    rule that judges a measured share either fires at the sample's lines or reports the margin it stayed
    silent by; and a finding the sample does not expect is one decided on a measured margin. The exact
    verdicts of the recorded run are the fast tier's (test_rules_on_evidence.py)."""
    result = sample_audit(sample)
    report = result.report
    assert report.errors == [], report.errors
    runs = {run.slug: run for run in report.rules}
    fired = {f.slug for f in report.findings}
    expected = EXPECTED[sample].fires_for(result.evidence)  # this machine's PyTorch and CPU
    expect = EXPECTED[sample]
    for slug in expected:
        run = runs[slug]
        assert run.status != "not run", f"{sample}/{slug} was not run: {run.why}"
        assert run.status == "fired" or run.margin is not None, f"{sample}/{slug}: silent without a measurement"
    for slug in fired - expected:
        assert runs[slug].margin is not None, f"{sample}: {slug} fired, unexpected and not on a measured margin"
    path = SAMPLES / f"{sample}.py"
    for slug, lines in expect.lines.items():
        if slug in fired:
            found = {loc.line for f in report.findings if f.slug == slug for loc in f.locations if loc.file == str(path)}
            assert lines <= found, f"{sample}/{slug}: expected at lines {sorted(lines)}, found at {sorted(found)}"


def test_borderline_resnet_layout_copies_point_to_channels_last():
    ruleset = load_rules()
    lowered = parse_settings(ruleset, ["non-contiguous.min_share=0.01"])  # past the borderline, every run
    evidence = saved_evidence("resnet_style")  # a recorded audit: the fast tier runs no model
    found = [f for f in run_rules(ruleset, evidence, lowered)[0] if f.slug == "non-contiguous"]
    assert len(found) == 1, f"step {evidence.step_ms} ms; findings {[f.message for f in found]}"
    finding = found[0]
    assert finding.evidence["copy_share_of_step"] >= 0.01, finding.message
    assert "channels_last" in finding.fix.summary, finding.fix.summary
    places = " ".join(loc.note + loc.function for loc in finding.locations)
    assert "ConvolutionBackward0" in places, places


# ---- non-contiguous -----------------------------------------------------------------------

@pytest.mark.slow
def test_non_contiguous_names_the_permute_and_recommends_channels_last(sample_audit):
    finding = share_finding(sample_audit("non_contiguous"), "non-contiguous")
    if finding is None:
        return  # measured beside another job: silent, and marked unreliable (share_finding)
    path = SAMPLES / "non_contiguous.py"
    assert f"permute at non_contiguous.py:{line_of(path, 'NCHW -> NHWC copy')}" in finding.message + str(
        [loc.note for loc in finding.locations])
    assert "paid by .contiguous()" in finding.message
    assert "channels_last" in finding.fix.summary and "matmul" not in finding.fix.summary
    assert finding.evidence["copy_share_of_step"] >= 0.05


@pytest.mark.slow
def test_non_contiguous_threshold_silences_it(sample_audit):
    """A threshold set above the share this run measured silences the rule, one below it keeps it: the share
    itself is the machine's (47% of the step on a quiet run; a load during the trace stage alone took it to 100%)."""
    ev = sample_audit("non_contiguous").evidence
    ruleset = load_rules()
    runs = []
    run_rules(ruleset, ev, runs=runs)
    share = next(r for r in runs if r.slug == "non-contiguous").margin.value  # reported when silent too
    # a share is at most 1 (--set refuses more): a step that was all copies has no threshold above it
    cases = [(share / 2, True)] + ([(share + 0.01, False)] if share + 0.01 <= 1 else [])
    for threshold, fires in cases:
        findings, _ = run_rules(ruleset, ev, parse_settings(ruleset, [f"non-contiguous.min_share={threshold}"]))
        assert bool([f for f in findings if f.slug == "non-contiguous"]) == fires, (threshold, share)


# ---- kernel-storm ---------------------------------------------------------------------------

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


# ---- missing-amp ----------------------------------------------------------------------------

@pytest.mark.slow
def test_missing_amp_stays_silent_under_autocast_and_for_sliver_matmuls(sample_audit):
    assert not [f for f in sample_audit("clean_mlp").report.findings if f.slug == "missing-amp"]  # autocast
    assert not [f for f in sample_audit("bf16_weights").report.findings if f.slug == "missing-amp"]  # bf16 params
    assert not [f for f in sample_audit("moe_layer").report.findings if f.slug == "missing-amp"]  # 4-MFLOP experts


# ---- data loader ----------------------------------------------------------------------------

@pytest.mark.slow
def test_dataloader_workers_states_a_concrete_value_and_why(sample_audit):
    finding = share_finding(sample_audit("dataloader_workers"), "dataloader-workers")
    if finding is None:
        return  # measured beside another job: silent, and marked unreliable (share_finding)
    ev = sample_audit("dataloader_workers").evidence
    suggested = finding.evidence["workers_suggested"]
    assert f"num_workers={suggested}" in finding.fix.summary and suggested >= 1
    assert f"{ev.env.cpu_cores_available} cores" in finding.message and "thread" in finding.message
    # The batch and the step are timed in different stages; beside another job either may be the one stretched
    # (a step of 168 ms against batches of 37 ms was seen beside a busy-loop): their order holds on a quiet run.
    if sample_audit("dataloader_workers").report.quality.state != "contended":
        assert finding.evidence["batch_ms"] > finding.evidence["step_ms"]


def test_dataloader_workers_on_cuda_leaves_one_core_for_the_trainer():
    ev = saved_evidence("dataloader_workers")
    cuda = as_device(ev, "cuda", cpu_cores_available=16)
    finding = next(f for f in run_rules(load_rules(), cuda)[0] if f.slug == "dataloader-workers")
    assert finding.evidence["cores_free_for_workers"] == 15
    assert finding.evidence["workers_suggested"] == min(15, finding.evidence["workers_needed"])


@pytest.mark.slow
def test_persistent_workers_when_worker_start_up_dominates_short_epochs(tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        def get_model(): return torch.nn.Linear(4, 1)
        def get_inputs(): return torch.ones(8, 4)
        def get_optimizer(model): return torch.optim.SGD(model.parameters(), lr=0.1)
        def get_dataloader():
            data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
            return DataLoader(data, batch_size=8, num_workers=2)  # two batches per epoch
    """)
    result = audit(path, tmp_path / "out")
    findings = [f for f in result.report.findings if f.slug == "dataloader-workers"]
    data = result.evidence.data
    assert data.num_workers == 2 and data.batches_per_epoch == 2 and data.first_batch_ms > 0
    # whether worker start-up shows over the batches (and reaches the threshold) is this machine's timing: under a
    # CPU hog the first batch came out faster than the median; the fast tier asserts the rule on saved evidence
    assert [f.severity for f in findings] in ([Severity.LOW], []), [f.message for f in result.report.findings]
    assert all("persistent_workers=True" in f.message for f in findings)


def test_pin_memory_on_cuda_counts_pageable_copies_from_a_recorded_trace():
    trace = parse_trace(str(shared_trace("critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")))
    evidence = Evidence(
        target=TargetInfo(model_file="recorded", device="cuda", mode="train"), trace=trace,
        data=DataLoaderInfo(pin_memory=False, batch_size=64, batch_bytes=64 * 3 * 224 * 224 * 4, batch_ms_median=1.0),
    )
    [finding] = [f for f in run_rules(load_rules(), evidence)[0] if f.slug == "dataloader-pin-memory"]
    assert finding.severity == Severity.MEDIUM and finding.evidence["count"] == 16
    pinned = evidence.model_copy(update={"data": evidence.data.model_copy(update={"pin_memory": True})})
    assert not [f for f in run_rules(load_rules(), pinned)[0] if f.slug == "dataloader-pin-memory"]


@pytest.mark.slow
def test_small_batches_on_cpu_get_no_pin_memory_advice(sample_audit):
    assert sample_audit("train_with_loader").evidence.data.batch_bytes < 2**20
    assert not [f for f in sample_audit("train_with_loader").report.findings if f.slug.startswith("dataloader")]
