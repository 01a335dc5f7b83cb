"""memory-growth (ADV147): The memory a step holds grows from step to step. Its cases: the bundled samples' saved
evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_memory import RULES

from advisor.rulekit.engine import run_rules
from conftest import SAMPLES
from devkit.saved_evidence import saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("memory-growth")


def memory_parameters() -> list:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpt_block_sample", SAMPLES / "gpt_block.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.get_model().parameters())


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


def test_memory_that_rises_and_falls_is_not_growth():
    evidence = saved_evidence("gpt_block")
    wavering = evidence.memory.model_copy(update={"step_end_bytes": [10_000_000, 12_000_000, 11_000_000],
                                                  "growth_bytes_per_step": 500_000.0})
    findings, run = _memory_run(evidence.model_copy(update={"memory": wavering}))
    assert findings == [] and run.margin.value == 0
