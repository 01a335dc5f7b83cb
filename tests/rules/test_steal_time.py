"""steal-time (ADV139): The hypervisor took this virtual machine's CPU time while the step was timed: steal. Its
cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_hardware_rules import _evidence, _findings, recorded

from advisor.machine.conditions import _Snapshot, between
from advisor.machine.procfs import parse_proc_stat
from advisor.rulekit.rule import Severity
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("steal-time")


def test_steal_is_read_from_the_hypervisors_column_of_proc_stat():
    """/proc/stat as a VM whose host took 20% of CPU 0 and none of CPU 1 over one second writes it."""
    before = parse_proc_stat("cpu  0 0 0 0 0 0 0 0\ncpu0 100 0 50 800 0 0 0 50 0 0\ncpu1 100 0 50 850 0 0 0 0 0 0\n")
    after = parse_proc_stat("cpu  0 0 0 0 0 0 0 0\ncpu0 150 0 60 820 0 0 0 70 0 0\ncpu1 150 0 60 890 0 0 0 0 0 0\n")
    conditions = between(_Snapshot(at=0.0, cpus=before, processes={}, throttle=None),
                         _Snapshot(at=1.0, cpus=after, processes={}, throttle=None), usable=[0, 1])
    assert conditions.steal_share == pytest.approx(20 / 200) and conditions.others_cores == pytest.approx(1.2)
    [finding], _ = _findings(_evidence(conditions), "steal-time")
    assert finding.severity == Severity.MEDIUM and "stole 10%" in finding.message
    assert _findings(_evidence(recorded("busy_loop")), "steal-time")[0] == []
