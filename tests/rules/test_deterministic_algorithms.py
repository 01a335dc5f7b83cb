"""deterministic-algorithms (ADV125): Deterministic algorithms forced on for a CUDA run. Its cases: the bundled
samples' saved evidence replayed, then its own."""

from __future__ import annotations

from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("deterministic-algorithms")
