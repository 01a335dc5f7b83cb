"""shared-machine (ADV137): Other processes used this process's CPUs while the step was timed: a shared machine.
Its cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_hardware_rules import _evidence, _findings, recorded

from advisor.assembly.build import assemble_report
from advisor.gathered import Gathered
from advisor.machine.conditions import MIN_WINDOW_S, _Snapshot, between, judge
from advisor.machine.procfs import parse_proc_stat
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Severity
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("shared-machine")


def test_a_busy_loop_beside_the_measurement_is_a_shared_machine_and_is_named():
    busy = recorded("busy_loop")
    assert busy.others_share >= 0.4 and any("sched_setaffinity" in p.command for p in busy.busiest)
    [finding], run = _findings(_evidence(busy), "shared-machine")
    assert finding.severity == Severity.HIGH and "sched_setaffinity" in finding.message
    assert finding.evidence["cores_free"] == 1 and "torch.set_num_threads(1)" in finding.fix.summary
    assert run.margin.value == pytest.approx(busy.others_share, abs=1e-3)
    assert any("other processes used" in reason for reason in judge(busy))


def test_a_window_shorter_than_the_ticks_can_resolve_leaves_its_shares_unread():
    """A script's timed steps of 2.7 ms, one of whose CPUs' counters moved by a tick: read as a share, 3.7 cores
    of 2 other processes'. Its shares are not read, the report says why, and no hardware rule judges them."""
    before = parse_proc_stat("cpu0 100 0 50 800 0 0 0 0\ncpu1 100 0 50 850 0 0 0 0\n")
    after = parse_proc_stat("cpu0 101 0 50 800 0 0 0 0\ncpu1 100 0 50 850 0 0 0 0\n")
    short = between(_Snapshot(at=0.0, cpus=before, processes={}, throttle=None),
                    _Snapshot(at=0.0027, cpus=after, processes={}, throttle=None), usable=[0, 1])
    assert short.others_cores is None and short.steal_share is None and short.own_cores is None
    assert any("window lasted 2.7 ms" in why for why in short.unreadable), short.unreadable
    assert judge(short) == [] and _findings(_evidence(short), "shared-machine")[0] == []
    report = assemble_report(Gathered(evidence=_evidence(short)), RuleConfig.load())
    assert report.quality.state == "unknown" and "window lasted 2.7 ms" in report.quality.summary
    long_enough = between(_Snapshot(at=0.0, cpus=before, processes={}, throttle=None),
                          _Snapshot(at=MIN_WINDOW_S, cpus=after, processes={}, throttle=None), usable=[0, 1])
    assert long_enough.others_cores == pytest.approx(0.01 / MIN_WINDOW_S)
    assert not any("window lasted" in why for why in long_enough.unreadable)
