"""The memory the step holds, by kind (capture/memory.py: tensors accounted over a few steps, the peak by the
allocator's own count), its growth and the line that made what outlived the steps, a larger batch measured. The
memory rules' own cases: tests/rules/test_memory_growth.py and test_memory_near_capacity.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from advisor.assembly.build import assemble_report
from advisor.gathered import Gathered
from advisor.report.html import render_html
from advisor.report.markdown import render_markdown
from advisor.rulekit.engine import RuleConfig
from devkit.saved_evidence import saved_evidence

RULES = RuleConfig.load()


def test_the_report_shows_the_memory_by_kind_its_growth_and_the_larger_batch():
    report = assemble_report(Gathered(evidence=saved_evidence("leaky_history")), RULES)
    page = render_html(report)
    assert 'id="memory"' in page and "activations" in page and "grows" in page
    if report.memory.larger_batch is not None:
        assert "samples per second" in page
    assert "grows 0.25 MB a step" in render_markdown(report)


class _Keeper(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 256)
        self.kept = []

    def forward(self, x):
        y = self.layer(x)
        self.kept.append(y)  # the line whose tensors outlive the step
        return y


@pytest.mark.slow
def test_the_memory_stage_measures_a_live_step_by_kind_and_finds_what_it_keeps():
    from advisor.capture.memory import measure_memory
    from advisor.workload.feed import Feed
    from advisor.workload.step import make_step
    from advisor.workload.target import Target

    model = _Keeper()
    optimizer = torch.optim.Adam(model.parameters())
    target = Target(path=__file__, module=None, model=model, inputs=None, mode="train", device=torch.device("cpu"),
                    loss_fn=lambda output, x: output.pow(2).mean())
    step = make_step(target, model, Feed(items=((torch.randn(32, 16), torch.randn(32, 16)),)), optimizer)
    step()
    memory = measure_memory(target, step, step_ms=1.0)
    assert "CPU allocator's rise" in memory.method and memory.steps == 2 and len(memory.step_end_bytes) == 3
    assert memory.kinds["temporaries"] > 0 and memory.peak_bytes == sum(memory.kinds.values())  # pow, mean: the peak's
    assert memory.growth_bytes_per_step == 32 * 256 * 4
    made_at = next(n for n, line in enumerate(open(__file__, encoding="utf-8"), 1) if "y = self.layer(x)" in line)
    assert (memory.held[0].file, memory.held[0].line) == (__file__, made_at)  # made there, kept the line after
    assert memory.kinds["parameters"] == memory.kinds["gradients"] == (16 * 256 + 256) * 4
    assert memory.kinds["optimizer state"] == 2 * memory.kinds["parameters"] + 2 * 4  # Adam: two moments and steps
    assert memory.larger_batch is not None and memory.larger_batch.batch_size == 32 and memory.larger_batch.factor == 2


@pytest.mark.slow
def test_a_step_that_leaves_nothing_behind_is_measured_once():
    """The second step only confirms a rise the first showed: a warm step that keeps nothing costs one step."""
    from advisor.capture.memory import measure_memory
    from advisor.workload.feed import Feed
    from advisor.workload.step import make_step
    from advisor.workload.target import Target

    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.Adam(model.parameters())
    target = Target(path=__file__, module=None, model=model, inputs=None, mode="train", device=torch.device("cpu"),
                    loss_fn=lambda output, x: output.pow(2).mean())
    step = make_step(target, model, Feed(items=((torch.randn(32, 16), torch.randn(32, 16)),)), optimizer)
    step()
    step()
    memory = measure_memory(target, step, step_ms=None)
    assert memory.steps == 1 and len(memory.step_end_bytes) == 2 and memory.growth_bytes_per_step <= 0
    assert memory.held == [] and memory.kinds["parameters"] == (16 * 16 + 16) * 4
