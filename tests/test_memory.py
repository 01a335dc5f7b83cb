"""The memory the step holds, by kind (capture/memory.py: tensors accounted over a few steps, the peak by the
allocator's own count), its growth and the line that made what outlived the steps, a larger batch measured; the
memory-growth rule over the saved evidence of leaky_history (a prediction kept every step, with its graph) and of
gpt_block (nothing kept)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from advisor.assembly.build import assemble_report
from advisor.gathered import Gathered
from advisor.report.html import render_html
from advisor.report.markdown import render_markdown
from advisor.rulekit.engine import RuleConfig, run_rules
from conftest import SAMPLES
from devkit.saved_evidence import as_cuda, saved_evidence

RULES = RuleConfig.load()


def _memory_run(evidence):
    runs = []
    findings, problems = run_rules(RULES.ruleset, evidence, runs=runs)
    assert problems == []
    [run] = [r for r in runs if r.slug == "memory-growth"]
    return [f for f in findings if f.slug == "memory-growth"], run


def test_the_kept_predictions_grow_the_step_and_are_placed_where_they_were_made():
    [finding], run = _memory_run(saved_evidence("leaky_history"))
    memory = saved_evidence("leaky_history").memory
    assert memory.growth_bytes_per_step == pytest.approx(64 * 1024 * 4, rel=0.01)  # one (64 x 1024) float32 a step
    [place] = finding.locations
    assert place.file == str(SAMPLES / "leaky_history.py") and "self.net(x)" in place.code
    assert run.margin.value >= run.margin.threshold


def test_a_step_that_keeps_nothing_does_not_grow_and_holds_each_kind():
    findings, run = _memory_run(saved_evidence("gpt_block"))
    memory = saved_evidence("gpt_block").memory
    assert findings == [] and run.status == "silent" and memory.growth_bytes_per_step == 0
    assert {"parameters", "gradients", "optimizer state", "activations", "inputs"} <= set(memory.kinds)
    assert memory.kinds["activations"] > memory.kinds["parameters"]  # a GPT's step holds its activations most
    assert memory.kinds["optimizer state"] == 2 * memory.kinds["parameters"] + 4 * len(memory_parameters())  # AdamW
    assert memory.peak_bytes == sum(memory.kinds.values()) and memory.capacity_bytes > memory.peak_bytes


def memory_parameters() -> list:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpt_block_sample", SAMPLES / "gpt_block.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.get_model().parameters())


def test_memory_that_rises_and_falls_is_not_growth():
    evidence = saved_evidence("gpt_block")
    wavering = evidence.memory.model_copy(update={"step_end_bytes": [10_000_000, 12_000_000, 11_000_000],
                                                  "growth_bytes_per_step": 500_000.0})
    findings, run = _memory_run(evidence.model_copy(update={"memory": wavering}))
    assert findings == [] and run.margin.value == 0


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


def _near_capacity(evidence):
    runs = []
    findings, _ = run_rules(RULES.ruleset, evidence, runs=runs)
    [run] = [r for r in runs if r.slug == "memory-near-capacity"]
    return [f for f in findings if f.slug == "memory-near-capacity"], run


def test_a_step_near_its_capacity_is_named_with_the_kind_that_holds_the_peak():
    evidence = saved_evidence("gpt_block")
    full = evidence.memory.model_copy(update={"capacity_bytes": int(evidence.memory.peak_bytes / 0.93),
                                              "capacity_kind": "the device's memory"})  # as on a GPU filled to 93%
    [finding], run = _near_capacity(as_cuda(evidence).model_copy(update={"memory": full}))
    assert finding.severity.value == "high" and finding.evidence["largest_kind"] == "activations"
    assert "torch.utils.checkpoint" in finding.fix.summary and run.margin.value == pytest.approx(0.93, abs=0.001)
    findings, run = _near_capacity(evidence)  # the same step on this machine's RAM
    assert findings == [] and run.status == "silent" and run.margin.value < 0.01
