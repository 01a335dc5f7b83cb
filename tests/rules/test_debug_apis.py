"""debug-apis (ADV126): Debugging and profiling tools left running inside the step. Its cases: the bundled samples'
saved evidence replayed, then its own."""

from __future__ import annotations

import pytest

from conftest import (
    SAMPLES,
    audit,
    line_of,
    only_finding,
    write_model,
)
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("debug-apis")


@pytest.mark.slow
def test_gradcheck_left_in_the_step(sample_audit):
    finding = only_finding(sample_audit("gradcheck_left_in"), "debug-apis")
    assert finding.evidence["apis"] == {"torch.autograd.gradcheck": 1}
    assert [loc.line for loc in finding.locations] == [line_of(SAMPLES / "gradcheck_left_in.py", "gradcheck(")]


@pytest.mark.slow
def test_a_step_that_profiles_itself_is_reported_not_crashed(tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(64, 64)
            def forward(self, x):
                with torch.profiler.profile():  # nested inside advisor's profiler, Kineto crashes
                    return self.fc(x)
        def get_model(): return Net().eval()
        def get_inputs(): return torch.randn(8, 64)
    """)
    result = audit(path, tmp_path / "out")
    finding = only_finding(result, "debug-apis")
    assert finding.evidence["apis"] == {"torch.profiler.profile": 1} and finding.locations[0].line == 8
    trace = next(s for s in result.report.stages if s.stage == "trace")
    assert trace.status == "skipped" and "own profiler" in trace.note
    assert result.report.errors == [] and result.evidence.graph is not None  # the other stages ran
