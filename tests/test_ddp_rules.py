"""The DDP rules over evidence of a torchrun job: each fires on its pattern and stays silent on a healthy one."""

from __future__ import annotations

import json

from advisor.evidence import DDPInfo, Evidence, RankSummary, TargetInfo, Timing
from advisor.rulekit.engine import load_rules, run_rules, thresholds_for
from advisor.trace.parse import parse_trace
from advisor.trace.ranks import RankTrace, host_gaps, summarize_file
from conftest import write_model
from devkit.saved_evidence import DDP_DIR, saved_evidence

STRAGGLER = thresholds_for(load_rules().get("straggler"), {})  # its thresholds as shipped

SCRIPT = "/w/train.py"
RULES = load_rules()


def _evidence(step_ms: float = 80.0, **ddp) -> Evidence:
    healthy = dict(file=SCRIPT, line=12, world_size=2, backend="gloo", find_unused_parameters=False, steps_watched=30,
                   parameter_bytes=6 * 2**20, bucket_cap_bytes=25 * 2**20, bucket_bytes=[2**20, 5 * 2**20],
                   forward_file=SCRIPT, forward_line=20, forwards_per_step=4.0, synced_forwards_per_step=1.0,
                   backward_comm_ms=12.0, backward_overlap_ms=3.0, backward_compute_ms=5.0)
    return Evidence(target=TargetInfo(model_file=SCRIPT, mode="train"),
                    timing=Timing.of_samples([step_ms] * 20, "perf_counter", 3), ddp=DDPInfo(**{**healthy, **ddp}))


def _fired(evidence: Evidence) -> dict:
    findings, problems = run_rules(RULES, evidence)
    assert problems == []
    return {f.slug: f for f in findings}


def test_a_healthy_ddp_job_gets_no_finding():
    assert _fired(_evidence()) == {}


def test_find_unused_parameters_fires_only_when_nothing_is_ever_unused():
    fired = _fired(_evidence(find_unused_parameters=True))
    assert fired["find-unused-parameters"].locations[0].line == 12
    assert "find-unused-parameters" not in _fired(_evidence(find_unused_parameters=True, unused_parameter_bytes=4096))
    assert "find-unused-parameters" not in _fired(_evidence(find_unused_parameters=True, steps_with_missing_grads=3))


def test_accumulation_without_no_sync_wastes_the_traffic_of_all_micro_steps_but_one():
    finding = _fired(_evidence(synced_forwards_per_step=4.0))["no-sync-accumulation"]
    assert finding.evidence["micro_steps"] == 4 and finding.evidence["wasted_traffic_share"] == 0.75
    assert finding.locations[0].line == 20 and finding.impact == round(0.75 * 48 / 80, 4)
    assert "no-sync-accumulation" not in _fired(_evidence(forwards_per_step=1.0, synced_forwards_per_step=1.0))


def test_small_buckets_are_reported_with_a_cap_from_the_gradient_size():
    many = _evidence(bucket_cap_bytes=2**20, bucket_bytes=[1536 * 1024] * 4, synced_forwards_per_step=4.0)
    finding = _fired(many)["ddp-buckets"]
    assert finding.evidence["buckets"] == 4 and finding.evidence["suggested_bucket_cap_mb"] == 25
    assert "gradient_as_bucket_view=True" in finding.fix.summary
    # a small model's one bucket at the end of backward: no bucket size helps, so nothing is said
    assert "ddp-buckets" not in _fired(_evidence(bucket_bytes=[6 * 2**20], backward_overlap_ms=0.5))
    large = _evidence(parameter_bytes=400 * 2**20, bucket_bytes=[400 * 2**20], backward_overlap_ms=0.5)
    assert _fired(large)["ddp-buckets"].evidence["suggested_bucket_cap_mb"] == 100  # split so buckets overlap


def test_the_straggler_says_what_its_rank_is_slow_in():
    from advisor.rules.application.straggler import _slow_in

    evidence = _evidence()
    evidence.rank_summaries = [RankSummary(rank=0, step_ms=80, comm_ms=70), RankSummary(rank=1, step_ms=80, comm_ms=50)]
    assert "work outside communication (30 ms per step against 10 ms" in _slow_in(evidence, 1, STRAGGLER)
    evidence.rank_summaries[1].data_wait_ms = 20.0
    assert "waiting for data (20 ms per step against 0 ms)" in _slow_in(evidence, 1, STRAGGLER)
    assert _slow_in(evidence, 0, STRAGGLER) == ""


def _ranks(late_us: float, step_us: float = 80_000.0) -> Evidence:
    """Two ranks' collective launches over 3 steps of 4 collectives; rank 1's come ``late_us`` later, give or
    take 100 µs."""
    def offsets(late, jitter):
        return {(step, k): 1000.0 * (k + 1) + late + jitter * ((step + k) % 3 - 1) for step in range(3) for k in range(4)}
    evidence = _evidence(step_ms=step_us / 1000)
    evidence.ranks = [RankTrace(path="r0", distributed_info={"rank": 0}, mean_step_us=step_us, collective_offsets=offsets(0, 0)),
                      RankTrace(path="r1", distributed_info={"rank": 1}, mean_step_us=step_us,
                                collective_offsets=offsets(late_us, 100.0))]
    return evidence


def test_the_straggler_reports_its_lateness_against_its_bar_fired_or_silent():
    runs = []
    findings, _ = run_rules(RULES, _ranks(5000), runs=runs)
    [late] = [f for f in findings if f.slug == "straggler"]
    bar_ms = max(STRAGGLER.min_late_ms, STRAGGLER.min_late_share * 80)  # the larger of the two bars: 1.6 ms here
    assert late.evidence["straggler"] == "rank 1" and late.margin.value == 5.0 and late.margin.threshold == bar_ms
    assert 0 < late.margin.noise < 0.2 and not late.margin.borderline  # 100 µs of jitter over 12 collectives
    runs = []
    findings, _ = run_rules(RULES, _ranks(1550), runs=runs)
    [silent] = [r for r in runs if r.slug == "straggler"]
    assert "straggler" not in {f.slug for f in findings} and silent.status == "silent"
    assert silent.margin.value == 1.55 and silent.margin.threshold == bar_ms and silent.margin.borderline  # within its noise


def test_a_silent_straggler_on_a_contended_machine_says_its_verdict_is_unreliable():
    from advisor.assembly.quality import mark_unreliable
    from advisor.report.schema import MeasurementQuality, Report

    runs = []
    run_rules(RULES, _ranks(200), runs=runs)
    report = Report(target=TargetInfo(model_file=SCRIPT), rules=runs,
                    quality=MeasurementQuality(state="contended", reasons=["another job held CPU 0"]))
    mark_unreliable(report, hardware_rules=set())
    [silent] = [r for r in report.rules if r.slug == "straggler"]
    assert silent.status == "silent" and silent.unreliable == "measured while another job held CPU 0"


def test_exposed_gloo_communication_is_read_from_a_real_ranks_trace():
    recorded = saved_evidence("ddp_train", DDP_DIR)  # rank 0 of samples/scripts/ddp_train.py, 2 gloo ranks
    fired = _fired(recorded)
    assert set(fired) == {"no-sync-accumulation", "find-unused-parameters", "ddp-buckets", "comm-overlap"}
    overlap = fired["comm-overlap"]
    assert overlap.evidence["measured_on"] == "gloo ranges and CPU ops"
    assert 0 < overlap.evidence["overlapped_share"] < 1 and overlap.evidence["exposed_share_of_step"] >= 0.05
    assert [loc.line for loc in overlap.locations] == [recorded.ddp.line]  # where the script builds DDP
    assert "waiting for slower ranks" in overlap.message and "4 micro-steps" in overlap.message


def test_one_bucket_at_the_end_of_backward_is_not_reported_as_exposed():
    clean = saved_evidence("ddp_clean", DDP_DIR)
    assert clean.trace.host_collectives and _fired(clean) == {}
    # the same trace, had the gradients gone out in two buckets, is judged on its exposed communication
    split = clean.model_copy(update={"ddp": clean.ddp.model_copy(update={"bucket_bytes": [2**20, 5 * 2**20],
                                                                         "bucket_cap_bytes": 2**20})})
    assert "comm-overlap" in _fired(split)


def test_host_time_between_the_scripts_torch_calls_is_summed_per_step_by_line_pair(tmp_path):
    def span(name, ts, dur):
        return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "tid": 1}

    events = [span("ProfilerStep#0", 0, 1000), span("ProfilerStep#1", 1000, 1000)]
    for start in (0, 1000):
        events += [span(f"advisor.src:torch.randn@{SCRIPT}:41", start + 10, 20),
                   span(f"advisor.src:Tensor.add@{SCRIPT}:42", start + 15, 5),  # inside the call above: no gap
                   span(f"advisor.src:linear@{SCRIPT}:44", start + 530, 100)]
    path = tmp_path / "rank1.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert host_gaps(parse_trace(str(path))) == {(SCRIPT, 41, 44): 500.0}


def test_the_straggler_is_pinned_to_the_lines_only_it_spends_time_in(tmp_path):
    from advisor.rules.application.straggler import _slow_place

    script = str(write_model(tmp_path, "x = 1\n" * 50, name="train.py"))
    fast = RankTrace(path="r0", host_gaps={(script, 41, 44): 480.0, (script, 44, 45): 5000.0, (script, 45, 41): 700.0})
    slow = RankTrace(path="r1", host_gaps={(script, 41, 44): 33_900.0, (script, 44, 45): 5600.0, (script, 45, 41): 400.0})
    place = _slow_place(slow, [fast], late_us=9000, th=STRAGGLER)
    assert place.line == 42 and "33.4 ms per step more than the other ranks in lines 42-43 of train.py" in place.note
    assert _slow_place(slow, [fast], late_us=80_000, th=STRAGGLER) is None  # 33 ms of host work explains too little of 80 ms
    wrapped = RankTrace(path="r1", host_gaps={**fast.host_gaps, (script, 45, 41): 20_700.0})
    assert _slow_place(wrapped, [fast], late_us=9000, th=STRAGGLER).line == 45  # after line 45, before the next iteration's 41
    assert _slow_place(slow, [RankTrace(path="r0")], late_us=9000, th=STRAGGLER) is None  # a trace advisor did not annotate


def test_a_rank_summary_built_from_the_collective_calls_alone_is_the_whole_traces_summary():
    path = str(DDP_DIR / "ddp_train.trace.json.gz")  # a gloo rank: its collectives are c10d:: calls, not kernels
    whole = parse_trace(path)
    summary = RankTrace.of(whole)
    assert summary.collective_offsets and summary.host_gaps  # not a comparison of empty summaries
    assert summarize_file(path) == summary
    assert len(parse_trace(path, only_ops=("c10d::",)).ops) < len(whole.ops) / 10
