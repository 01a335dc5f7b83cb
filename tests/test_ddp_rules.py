"""The DDP rules together over evidence of a torchrun job: a healthy job gets none, and what they read of ranks'
traces. Each rule's own cases (straggler, comm-overlap, ddp-buckets, ...) are in tests/rules/."""

from __future__ import annotations

import json

from advisor.evidence import DDPInfo, Evidence, TargetInfo, Timing
from advisor.rulekit.engine import load_rules, run_rules
from advisor.trace.parse import parse_trace
from advisor.trace.ranks import RankTrace, host_gaps, summarize_file
from devkit.saved_evidence import DDP_DIR, saved_evidence

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


def test_exposed_gloo_communication_is_read_from_a_real_ranks_trace():
    recorded = saved_evidence("ddp_train", DDP_DIR)  # rank 0 of samples/scripts/ddp_train.py, 2 gloo ranks
    fired = _fired(recorded)
    assert set(fired) == {"no-sync-accumulation", "find-unused-parameters", "ddp-buckets", "comm-overlap"}
    overlap = fired["comm-overlap"]
    assert overlap.evidence["measured_on"] == "gloo ranges and CPU ops"
    assert 0 < overlap.evidence["overlapped_share"] < 1 and overlap.evidence["exposed_share_of_step"] >= 0.05
    assert [loc.line for loc in overlap.locations] == [recorded.ddp.line]  # where the script builds DDP
    assert "waiting for slower ranks" in overlap.message and "4 micro-steps" in overlap.message


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


def test_a_rank_summary_built_from_the_collective_calls_alone_is_the_whole_traces_summary():
    path = str(DDP_DIR / "ddp_train.trace.json.gz")  # a gloo rank: its collectives are c10d:: calls, not kernels
    whole = parse_trace(path)
    summary = RankTrace.of(whole)
    assert summary.collective_offsets and summary.host_gaps  # not a comparison of empty summaries
    assert summarize_file(path) == summary
    assert len(parse_trace(path, only_ops=("c10d::",)).ops) < len(whole.ops) / 10
