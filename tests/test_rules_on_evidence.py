"""The fast tier: every rule over the saved evidence of real audits (tests/data/evidence).

The evidence was recorded by real audits of the bundled samples (``tests/record_evidence.py``);
here the rules run over exactly those measurements, so each verdict is fixed and no test depends
on this machine's speed or instruction set. Each rule has positive and negative cases; GPU-only
rules are checked on the same evidence recorded as if it came from a CUDA device, and the trace
rules also on the real GPU traces in ../shared (tests/test_analyze.py, tests/test_kineto.py).
"""

from __future__ import annotations

import pytest

from advisor.evidence import DataLoaderInfo
from advisor.rulekit.engine import RuleConfig, load_rules
from advisor.rulekit.rule import Severity
from conftest import SAMPLES
from devkit.saved_evidence import annotated_samples, annotated_scripts, as_cuda, as_device, expected, recorded_samples, saved_evidence

RULES = RuleConfig.load()

# what each sample must make advisor say, written in the sample itself (``# expect: slug`` at its line)
EXPECTED = annotated_samples()
HEALTHY = tuple(sample for sample, expect in EXPECTED.items() if expect.nothing and not expect.on_cuda)


def findings(evidence):
    return RULES.run(evidence)[0]


def fired(evidence) -> set[str]:
    return {f.slug for f in findings(evidence)}


def only(evidence, slug: str):
    found = [f for f in findings(evidence) if f.slug == slug]
    assert len(found) == 1, [f.slug for f in findings(evidence)]
    return found[0]


def test_every_sample_has_saved_evidence_and_says_what_it_expects():
    assert set(recorded_samples()) == set(EXPECTED)
    silent = [sample for sample, expect in EXPECTED.items() if not (expect.fires or expect.nothing or expect.on_cuda)]
    assert silent == [], "a sample says neither '# expect: slug' nor '# expect nothing'"


def test_an_expectation_bounded_to_earlier_releases_is_not_held_against_later_ones(tmp_path):
    sample = tmp_path / "bounded.py"
    sample.write_text("x = 1  # expect: host-sync\n# expect anywhere before torch 2.14: graph-breaks\n", encoding="utf-8")
    expect = expected(sample)
    assert expect.fires_with("2.13.0+cpu") == {"host-sync", "graph-breaks"} == expect.fires
    assert expect.fires_with("2.14.1+cu130") == expect.fires_with("3.0.0") == {"host-sync"}


@pytest.mark.parametrize("sample", sorted(EXPECTED))
def test_each_sample_fires_exactly_its_rules_at_its_lines(sample):
    evidence = saved_evidence(sample)
    result = findings(evidence)
    expect = EXPECTED[sample]
    assert {f.slug for f in result} == expect.fires_for(evidence), [f.message for f in result]
    path = SAMPLES / f"{sample}.py"
    for slug, lines in expect.lines.items():
        if slug not in expect.fires_for(evidence):
            continue  # expected on another CPU than the one the evidence was recorded on
        found = {loc.line for f in result if f.slug == slug for loc in f.locations if loc.file == str(path)}
        assert lines <= found, f"{sample}/{slug}: expected at lines {sorted(lines)}, found at {sorted(found)}"


@pytest.mark.parametrize("sample", sorted(s for s, expect in EXPECTED.items() if expect.on_cuda))
def test_each_sample_replayed_on_a_gpu_fires_its_gpu_rules(sample):
    assert EXPECTED[sample].on_cuda <= fired(as_cuda(saved_evidence(sample)))


def test_every_rule_has_a_positive_and_a_negative_case():
    from test_analyze import SHARED_TRACE_POSITIVES
    from test_hardware_rules import RECORDED_POSITIVES
    from test_step_log import RECORDED_RUN_POSITIVES, REPLAYED_POSITIVES

    positives = set().union(*(e.fires | e.on_cuda for e in EXPECTED.values()),
                            *(e.under_torchrun for e in annotated_scripts().values()),
                            *SHARED_TRACE_POSITIVES.values(), RECORDED_POSITIVES, RECORDED_RUN_POSITIVES,
                            REPLAYED_POSITIVES)
    slugs = {rule.slug for rule in load_rules().rules}
    assert slugs <= positives, f"rules with no positive fixture: {sorted(slugs - positives)}"
    assert HEALTHY, "no sample is the negative control of every rule ('# expect nothing')"


def test_findings_carry_ids_numbers_and_fixes():
    for sample, slug in [("non_contiguous", "non-contiguous"), ("kernel_storm", "kernel-storm"),
                         ("missing_amp", "missing-amp"), ("dataloader_workers", "dataloader-workers")]:
        finding = only(saved_evidence(sample), slug)
        assert finding.id.startswith(finding.code) and any(ch.isdigit() for ch in finding.message)
        assert finding.impact is not None and 0 < finding.impact <= 1
        assert finding.fix is not None and finding.fix.summary and finding.fix.docs
    again = findings(saved_evidence("host_sync"))
    assert [f.id for f in again] == [f.id for f in findings(saved_evidence("host_sync"))]
    assert len({f.id for f in again}) == len(again)


# ---- device-aware rules: the same evidence, recorded as if on a GPU ------------------------------

def test_gpu_library_flags_are_silent_on_cpu_and_reported_on_a_gpu():
    evidence = saved_evidence("gpu_flags")
    assert not fired(evidence) & {"cudnn-benchmark", "tf32-disabled", "deterministic-algorithms"}
    on_gpu = fired(as_cuda(evidence))
    assert {"cudnn-benchmark", "tf32-disabled", "deterministic-algorithms"} <= on_gpu, on_gpu
    tuned = as_cuda(evidence, cudnn_benchmark=True, deterministic_algorithms=False, cudnn_deterministic=False,
                    tf32_matmul=True, float32_matmul_precision="high")
    assert not fired(tuned) & {"cudnn-benchmark", "tf32-disabled", "deterministic-algorithms"}
    assert "tf32-disabled" not in fired(as_cuda(evidence, gpu_capability=(7, 0)))  # no TF32 before Ampere
    assert "cudnn-benchmark" not in fired(as_cuda(saved_evidence("clean_mlp"), cudnn_benchmark=False))  # no convs


def test_tf32_is_not_advised_when_the_step_runs_under_autocast():
    evidence = saved_evidence("gpu_flags")
    assert "tf32-disabled" in fired(as_cuda(evidence))
    under_autocast = as_cuda(evidence).model_copy(update={
        "target": as_cuda(evidence).target.model_copy(update={"autocast": "bfloat16"})})
    assert "tf32-disabled" not in fired(under_autocast)


def test_misaligned_dims_only_on_cuda_and_only_for_reduced_precision():
    evidence = saved_evidence("misaligned_head")
    assert "misaligned-dims" not in fired(evidence)
    finding = only(as_cuda(evidence), "misaligned-dims")
    assert finding.evidence["shapes"] and finding.evidence["multiple"] == 8
    assert {n.dtype for n in evidence.graph.calls()} & {"float16", "bfloat16"}  # the sample's half matmuls


def test_misaligned_dims_counts_matmuls_that_autocast_would_run_in_half():
    evidence = saved_evidence("misaligned_head")
    graph_dtypes = {n.dtype for n in evidence.graph.calls()}
    autocast = evidence.target.model_copy(update={"autocast": "float16", "device": "cuda:0"})
    found = fired(as_cuda(evidence).model_copy(update={"target": autocast}))
    assert "misaligned-dims" in found, graph_dtypes


def test_channels_last_severity_follows_the_device_and_precision():
    evidence = saved_evidence("conv_bias_bn")
    assert only(evidence, "channels-last").severity == Severity.LOW  # CPU: measured, not promised
    fp32_gpu = only(as_cuda(evidence), "channels-last")
    assert fp32_gpu.evidence["low_precision"] is False
    amp = as_cuda(evidence).model_copy(update={
        "target": as_cuda(evidence).target.model_copy(update={"autocast": "bfloat16"})})
    half_gpu = only(amp, "channels-last")
    assert half_gpu.severity == Severity.MEDIUM and half_gpu.evidence["low_precision"] is True


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


def test_empty_cache_is_low_on_cpu_and_high_on_cuda():
    evidence = saved_evidence("empty_cache_step")
    assert only(evidence, "empty-cache").severity == Severity.LOW
    assert only(as_cuda(evidence), "empty-cache").severity == Severity.HIGH


def test_data_parallel_on_one_and_on_several_gpus():
    evidence = saved_evidence("data_parallel")
    assert only(evidence, "dataparallel").severity == Severity.LOW
    assert only(as_cuda(evidence, gpu_count=4), "dataparallel").severity.rank > Severity.LOW.rank


def test_pin_memory_is_info_on_cpu_and_counts_on_cuda():
    evidence = saved_evidence("dataloader_workers")
    assert only(evidence, "dataloader-pin-memory").severity == Severity.INFO
    pinned = evidence.model_copy(update={"data": evidence.data.model_copy(update={"pin_memory": True})})
    assert "dataloader-pin-memory" not in fired(pinned)


def test_persistent_workers_only_where_worker_start_up_is_paid_every_epoch():
    evidence = saved_evidence("many_workers")  # 4 workers, an 8-batch epoch, the first batch 5.7 ms against 0.85
    restarting = only(evidence, "dataloader-workers")
    assert "persistent_workers=True" in restarting.message and restarting.severity == Severity.LOW
    kept = evidence.model_copy(update={"data": evidence.data.model_copy(update={"persistent_workers": True})})
    assert "dataloader-workers" not in fired(kept)
    quick = evidence.model_copy(update={"data": evidence.data.model_copy(update={"first_batch_ms": 0.9})})
    assert "dataloader-workers" not in fired(quick)  # start-up under 10% of the epoch


def test_cpu_threads_from_omp_and_threads_plus_workers():
    evidence = saved_evidence("clean_mlp")
    assert "cpu-threads" not in fired(evidence)
    eight = {"cpu_cores_available": 8, "torch_threads": 8}
    assert "cpu-threads" in fired(as_device(evidence, "cpu", omp_num_threads="32", **eight))
    loader = DataLoaderInfo(num_workers=8, batch_size=8, batch_ms_median=1.0)
    crowded = as_device(evidence, "cpu", **eight).model_copy(update={"data": loader})
    assert "cpu-threads" in fired(crowded)


def test_thresholds_move_verdicts_on_fixed_evidence():
    evidence = saved_evidence("non_contiguous")
    strict = RuleConfig.load(settings=["non-contiguous.min_share=0.99"])
    assert "non-contiguous" not in {f.slug for f in strict.run(evidence)[0]}
    off = RuleConfig.load(disabled=["non-contiguous"])
    assert "non-contiguous" not in {f.slug for f in off.run(evidence)[0]}
