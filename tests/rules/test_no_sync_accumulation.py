"""no-sync-accumulation (ADV135): Gradient accumulation that all-reduces on every micro-step. Its cases: the
bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_ddp_rules import _evidence, _fired

from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("no-sync-accumulation")


def test_accumulation_without_no_sync_wastes_the_traffic_of_all_micro_steps_but_one():
    finding = _fired(_evidence(synced_forwards_per_step=4.0))["no-sync-accumulation"]
    assert finding.evidence["micro_steps"] == 4 and finding.evidence["wasted_traffic_share"] == 0.75
    assert finding.locations[0].line == 20 and finding.impact == round(0.75 * 48 / 80, 4)
    assert "no-sync-accumulation" not in _fired(_evidence(forwards_per_step=1.0, synced_forwards_per_step=1.0))
