"""sync-memcpy (ADV108): Blocking host-device copies inside the step. Its cases: the bundled samples' saved
evidence replayed, then its own."""

from __future__ import annotations

from test_analyze import ALEXNET_TRACE, BUSY_TRACE, _findings

from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("sync-memcpy")


def test_alexnets_blocking_copies_are_counted_at_the_operator_that_waits():
    found = _findings(ALEXNET_TRACE)
    assert found["sync-memcpy"].evidence["blocking_copies_per_step"] == 16  # cudaMemcpyAsync + stream sync in aten::to
    assert found["sync-memcpy"].locations[0].function == "aten::to"
    assert "in the trace" in found["sync-memcpy"].message  # no ProfilerStep markers: no per-step claim


def test_a_trace_that_never_waits_on_a_copy_is_silent():
    assert "sync-memcpy" not in _findings(BUSY_TRACE)
