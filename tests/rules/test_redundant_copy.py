"""redundant-copy (ADV118): Copies and conversions that change nothing. Its cases: the bundled samples' saved
evidence replayed, then its own."""

from __future__ import annotations

import pytest

from conftest import SAMPLES, audit, line_of, only_finding, slugs, write_model
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("redundant-copy")


@pytest.mark.slow
def test_redundant_clones_and_no_op_contiguous(sample_audit):
    finding = only_finding(sample_audit("redundant_clones"), "redundant-copy")
    path = str(SAMPLES / "redundant_clones.py")
    assert finding.evidence["calls"] == 8  # 4 blocks x (.contiguous() + .clone())
    assert sorted({tuple(site[1:]) for site in finding.evidence["sites"]}) == [
        (line_of(SAMPLES / "redundant_clones.py", ".contiguous()  #"), "contiguous"),
        (line_of(SAMPLES / "redundant_clones.py", "hidden.clone()"), "clone")]
    assert all(site[0] == path for site in finding.evidence["sites"])
    # what the clones cost, read from the trace; their share of the step is as reliable as the machine was quiet
    assert finding.evidence["clone_us_per_step"] > 0 and finding.evidence["clone_share_of_step"] is not None


@pytest.mark.slow
def test_needed_copies_and_autocast_casts_are_not_redundant(tmp_path, sample_audit):
    path = write_model(tmp_path, """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(32, 32)
            def forward(self, x):
                kept = x.clone()                     # an input: the clone protects the caller's tensor
                h = self.fc(x)
                h2 = h.clone()
                h2.mul_(2)                           # modified in place: the clone is needed
                t = h.transpose(0, 1).contiguous()   # after a view: needed for some shapes
                return kept.sum() + h2 + t.t() + self.fc(x).float()   # .float(): converts under autocast
        def get_model(): return Net().eval()
        def get_inputs(): return torch.randn(32, 32)
    """)
    assert "redundant-copy" not in slugs(audit(path, tmp_path))
    assert "redundant-copy" not in slugs(sample_audit("non_contiguous"))  # .contiguous() after permute
