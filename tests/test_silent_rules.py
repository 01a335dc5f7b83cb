"""Every rule that ran and stayed silent says why: the measured value it held against its threshold (a margin), or
what it found absent or why it did not apply. A report never lists a silent rule with neither, on the CPU runs
of the samples as recorded, the same replayed as an A100, the ranks of the DDP jobs, and real GPU traces."""

from __future__ import annotations

import pytest

from advisor.capture.recorded import evidence_from_traces
from advisor.machine.state import MeasurementConditions
from advisor.rulekit.engine import RuleConfig
from advisor.trace.parse import parse_trace
from conftest import ALL_SAMPLES, shared_trace
from devkit.saved_evidence import DDP_DIR, as_cuda, recorded_samples, saved_evidence

RULES = RuleConfig.load()
SHARED_TRACES = ["critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
                 "nccl_parser_config/nccl_data.json.gz",
                 "with_gpu_user_annotation/step_based_trace_2543932.json.gz",
                 "critical_path/cuda_event_sync/event_sync_trace.json.gz"]


def unexplained(evidence) -> list[str]:
    runs = []
    RULES.run(evidence, runs)
    return [run.slug for run in runs if run.status == "silent" and run.margin is None and not run.why]


@ALL_SAMPLES
@pytest.mark.parametrize("sample", recorded_samples())
def test_every_silent_rule_explains_itself_on_each_samples_evidence(sample):
    evidence = saved_evidence(sample)
    assert unexplained(evidence) == []
    assert unexplained(as_cuda(evidence)) == []


def test_machine_rules_explain_a_window_too_short_to_read_the_cpu_shares(machine_rules):
    """A script's 20 steps of 2 ms (cleanrl's DQN): /proc's 10 ms ticks cannot share a 68 ms window, and no
    quota is set; the machine-state rules say so rather than nothing."""
    evidence = saved_evidence("clean_mlp")
    short = MeasurementConditions(wall_s=0.068, cores_usable=2, unreadable=[
        "the CPU shares: the window lasted 68 ms, and /proc counts CPU time in ticks of 10 ms"])
    evidence = evidence.model_copy(update={"timing": evidence.timing.model_copy(update={"conditions": short})})
    runs = []
    RuleConfig.load().run(evidence, runs)  # the machine-state rules on, as in a user's run
    decided = {run.slug: run for run in runs}
    assert "window lasted 68 ms" in decided["shared-machine"].why and "window lasted 68 ms" in decided["steal-time"].why
    assert decided["cpu-quota"].why.startswith("no cgroup CPU quota")
    assert [run.slug for run in runs if run.status == "silent" and run.margin is None and not run.why] == []


@pytest.mark.parametrize("job", ["ddp_clean", "ddp_train"])
def test_every_silent_rule_explains_itself_on_a_ddp_rank(job):
    assert unexplained(saved_evidence(job, DDP_DIR)) == []


@pytest.mark.parametrize("trace", SHARED_TRACES)
def test_every_silent_rule_explains_itself_on_a_recorded_gpu_trace(trace):
    assert unexplained(evidence_from_traces(parse_trace(str(shared_trace(trace))))) == []


def test_a_silent_rule_says_what_it_found_absent_in_the_report_record():
    runs = []
    RULES.run(saved_evidence("clean_mlp"), runs)
    decided = {run.slug: run for run in runs}
    assert decided["anomaly-detection"].why == "autograd anomaly detection is off"
    assert decided["graph-breaks"].why.startswith("TorchDynamo captured the forward whole")
    assert decided["host-sync"].status == "silent" and decided["host-sync"].why
