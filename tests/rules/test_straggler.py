"""straggler (ADV112): A rank that reaches its collectives late, making every other rank wait. Its cases: the
bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import gzip
import json

from test_ddp_rules import RULES, SCRIPT, _evidence

from advisor.commands.analyze import AnalyzeOptions, run_analyze
from advisor.evidence import Evidence, RankSummary, TargetInfo
from advisor.rulekit.engine import load_rules, run_rules, thresholds_for
from advisor.trace.parse import parse_trace
from advisor.trace.ranks import RankTrace
from conftest import shared_trace, write_model
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("straggler")


def _ranks_with_delay(tmp_path, delay_us: float):
    source = json.load(gzip.open(shared_trace("nccl_parser_config/nccl_data.json.gz")))
    collective = {e["args"]["correlation"] for e in source["traceEvents"]
                  if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()}
    folder = tmp_path / f"ranks-{int(delay_us)}"
    folder.mkdir()
    for rank in (0, 1):
        document = json.loads(json.dumps(source))
        document["distributedInfo"]["rank"] = rank
        if rank == 1:
            for event in document["traceEvents"]:
                if event.get("cat") == "cuda_runtime" and event.get("args", {}).get("correlation") in collective:
                    event["ts"] += delay_us
        (folder / f"rank-{rank}.json").write_text(json.dumps(document))
    return folder


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


STRAGGLER = thresholds_for(load_rules().get("straggler"), {})  # its thresholds as shipped


def test_the_straggler_says_what_its_rank_is_slow_in():
    from advisor.rules.application.straggler import _slow_in

    evidence = _evidence()
    evidence.rank_summaries = [RankSummary(rank=0, step_ms=80, comm_ms=70), RankSummary(rank=1, step_ms=80, comm_ms=50)]
    assert "work outside communication (30 ms per step against 10 ms" in _slow_in(evidence, 1, STRAGGLER)
    evidence.rank_summaries[1].data_wait_ms = 20.0
    assert "waiting for data (20 ms per step against 0 ms)" in _slow_in(evidence, 1, STRAGGLER)
    assert _slow_in(evidence, 0, STRAGGLER) == ""


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


def test_a_rank_launching_collectives_late_is_the_straggler(tmp_path):
    result = run_analyze(AnalyzeOptions(paths=(str(_ranks_with_delay(tmp_path, 5000)),), out_dir=str(tmp_path / "o")))
    [straggler] = [f for f in result.report.findings if f.slug == "straggler"]
    assert straggler.evidence["straggler"] == "rank 1" and 4.9 < straggler.evidence["late_ms"] < 5.1
    assert straggler.evidence["collectives_compared"] == 21
    even = run_analyze(AnalyzeOptions(paths=(str(_ranks_with_delay(tmp_path, 0)),), out_dir=str(tmp_path / "p")))
    assert not [f for f in even.report.findings if f.slug == "straggler"]


def test_a_folder_of_many_ranks_is_summarised_in_worker_processes_and_its_straggler_found(tmp_path):
    from devkit.synthetic_ranks import make_ranks

    base = shared_trace("nccl_parser_config/nccl_data.json.gz")
    make_ranks(str(tmp_path), 4, str(base))  # copies of one real trace; the last rank launches its collectives 20 ms late
    result = run_analyze(AnalyzeOptions(paths=(str(tmp_path),), out_dir=str(tmp_path / "out")))
    assert [rank.rank for rank in result.evidence.ranks] == [0, 1, 2, 3]
    assert all(isinstance(rank, RankTrace) for rank in result.evidence.ranks)  # only the primary is kept whole
    straggler = next(f for f in result.report.findings if f.slug == "straggler")
    assert straggler.evidence["straggler"] == "rank 3" and straggler.evidence["late_ms"] == 20.0
    # the pool's summaries are the summaries of the traces themselves
    assert result.evidence.ranks[2] == RankTrace.of(parse_trace(str(tmp_path / "rank002.json.gz")))
