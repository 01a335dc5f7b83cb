"""find-unused-parameters (ADV134): DDP searches for unused parameters that every step uses. Its cases: the bundled
samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_ddp_rules import _evidence, _fired

from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("find-unused-parameters")


def test_find_unused_parameters_fires_only_when_nothing_is_ever_unused():
    fired = _fired(_evidence(find_unused_parameters=True))
    assert fired["find-unused-parameters"].locations[0].line == 12
    assert "find-unused-parameters" not in _fired(_evidence(find_unused_parameters=True, unused_parameter_bytes=4096))
    assert "find-unused-parameters" not in _fired(_evidence(find_unused_parameters=True, steps_with_missing_grads=3))
