"""cpu-quota (ADV138): A cgroup CPU quota below the threads torch runs: throttled every scheduling period. Its
cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_hardware_rules import _evidence, _findings, recorded

from advisor.rulekit.rule import Severity
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("cpu-quota")


def test_threads_above_a_cgroup_quota_are_reported_and_a_throttled_quota_too():
    quota = recorded("quota")
    assert quota.quota_cores == 0.5 and quota.throttled_share > 0.5
    [over], _ = _findings(_evidence(quota, threads=2), "cpu-quota")
    assert over.severity == Severity.HIGH and "2 intra-op threads under a CPU quota of 0.5 cores" in over.message
    assert over.evidence["suggested_threads"] == 1
    [throttled], _ = _findings(_evidence(quota, threads=1), "cpu-quota")  # no excess, but throttled all the same
    assert throttled.severity == Severity.MEDIUM and "throttled" in throttled.message
    assert _findings(_evidence(recorded("busy_loop")), "cpu-quota")[0] == []  # no quota set
