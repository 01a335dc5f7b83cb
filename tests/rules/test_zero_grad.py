"""zero-grad (ADV128): Gradients zeroed in place instead of set to None. Its cases: the bundled samples' saved
evidence replayed, then its own."""

from __future__ import annotations

import pytest

from advisor.capture.calls import static_sites
from conftest import (
    SAMPLES,
    audit,
    line_of,
    only_finding,
    verify_fix,
    write_model,
)
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("zero-grad")


@pytest.mark.slow
def test_zero_grad_in_place_read_from_the_training_loop(sample_audit, tmp_path):
    finding = only_finding(sample_audit("zero_grad_in_place"), "zero-grad")
    assert finding.evidence["seen_in_step"] is False
    assert finding.locations[0].line == line_of(SAMPLES / "zero_grad_in_place.py", "optimizer.zero_grad(set_to_none=False)")
    path = write_model(tmp_path, """
        def loop(model, optimizer):
            optimizer.zero_grad()
            optimizer.zero_grad(set_to_none=True)
            model.zero_grad(False)
            for step in range(3):
                torch.save(model, "x")
    """)
    sites = static_sites(str(path))
    assert [(s.api, s.line, s.arguments) for s in sites] == [
        ("zero_grad", 2, {}), ("zero_grad", 3, {"set_to_none": "True"}), ("zero_grad", 4, {"set_to_none": "False"})]


@pytest.mark.slow
def test_zero_grad_in_place_inside_the_step_is_measured_with_set_to_none(tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(32, 32)
            def forward(self, x):
                self.zero_grad(set_to_none=False)  # clears its own gradients, in place, every step
                return self.fc(x)
        def get_model(): return Net()
        def get_inputs(): return torch.randn(8, 32)
        def get_optimizer(model): return torch.optim.SGD(model.parameters(), lr=0.1)
    """)
    result = audit(path, tmp_path / "out")
    finding = only_finding(result, "zero-grad")
    assert finding.evidence["seen_in_step"] is True and finding.locations[0].note == "runs in the step"
    verdict = verify_fix(path, finding, "zero-grad")
    assert verdict.status in ("verified", "no-gain", "slower", "inconclusive") and verdict.max_rel_error <= 1e-6
