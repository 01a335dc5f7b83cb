"""graph-breaks (ADV122): TorchDynamo graph breaks: where torch.compile would have to split the model. Its cases:
the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest

from conftest import SAMPLES, line_of, only_finding, slugs
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("graph-breaks")


@pytest.mark.slow
def test_graph_breaks_are_reported_with_reasons_and_lines(sample_audit):
    finding = only_finding(sample_audit("host_sync"), "graph-breaks")
    path = SAMPLES / "host_sync.py"
    assert finding.evidence["places"] == 2 and finding.evidence["graphs"] > 2
    assert [loc.line for loc in finding.locations] == [line_of(path, ".item() > 0.5"),
                                                       line_of(path, "scores.squeeze(-1) > 0.3")]
    assert any("item()" in reason for reason in finding.evidence["reasons"])
    for sample in ("gpt_block", "moe_layer"):  # one graph; Dynamo traces moe_layer's torch.where
        assert "graph-breaks" not in slugs(sample_audit(sample))
