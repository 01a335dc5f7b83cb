"""A step near its capacity, its fix verified for memory: the repeated blocks checkpointed (or the step under bf16
autocast) on a copy, the gradients compared, each side's peak measured by the allocator's own count
(workload/peak_memory.py) and what the fix costs the step's time beside it, never as a gain."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from advisor.assembly.build import assemble_report
from advisor.evidence.memory_records import PeakMemoryAB, StepMemory
from advisor.gathered import Gathered
from advisor.report.html import render_html
from advisor.report.markdown import render_markdown
from advisor.report.terminal import describe_verification
from advisor.rulekit.engine import RuleConfig, load_rules
from advisor.rulekit.rule import Finding, Verification
from advisor.verify.memory_ab import memory_verdict
from advisor.verify.orchestrate import measure_fixes
from advisor.workload.peak_memory import held_bytes, rise_of
from conftest import SAMPLES, check_rule, verify_sample
from devkit.saved_evidence import as_cuda, saved_evidence

SLUG = "memory-near-capacity"
SPEC = load_rules().get(SLUG).fix_spec


def _filled(evidence, share: float = 0.93, memory: StepMemory | None = None):
    """The evidence as on a GPU whose memory the step (``memory``, else the evidence's) takes ``share`` of."""
    held = memory or evidence.memory
    full = held.model_copy(update={"capacity_bytes": int(held.held_bytes / share), "capacity_kind": "the device's memory"})
    return as_cuda(evidence).model_copy(update={"memory": full})


def _gpt_line(text: str) -> int:
    return next(n for n, line in enumerate(open(SAMPLES / "gpt_block.py", encoding="utf-8"), 1) if text in line)


def test_a_training_step_full_of_activations_gets_its_repeated_blocks_checkpointed():
    [finding] = check_rule(SLUG, _filled(saved_evidence("gpt_block")))
    assert finding.evidence["remedy"] == "checkpoint" and finding.evidence["blocks"] == ["h.0", "h.1"]
    assert finding.evidence["block_type"] == "Block" and "torch.utils.checkpoint" in finding.fix.summary
    [place] = finding.locations
    assert place.line == _gpt_line("x = x + self.attn(self.ln_1(x))")
    assert SPEC.measures == "memory" and SPEC.unmeasurable(finding, "cuda:0") is None
    assert SPEC.tolerance_for(finding) == 1e-4  # recomputation repeats the same operators: the gradients equal


def test_blocks_that_hold_a_batchnorm_are_not_checkpointed_and_the_step_gets_autocast():
    evidence = saved_evidence("gpt_block")
    normed = [node.model_copy(update={"module_type": "BatchNorm1d"}) if node.module_path.endswith(".ln_1") else node
              for node in evidence.graph.nodes]  # a recomputation would update its running statistics twice
    evidence = evidence.model_copy(update={"graph": evidence.graph.model_copy(update={"nodes": normed})})
    [finding] = check_rule(SLUG, _filled(evidence))
    assert finding.evidence["remedy"] == "autocast" and finding.evidence["autocast_dtype"] == "bfloat16"
    assert finding.locations == [] and SPEC.tolerance_for(finding) == 0.05


def test_a_peak_of_parameters_or_a_step_under_autocast_already_has_no_automatic_fix():
    evidence = saved_evidence("activation_chain")  # inference, twelve repeated layers: nothing saved for a backward
    weights = StepMemory(device="cuda:0", peak_bytes=10 * 2**30, kinds={"parameters": 9 * 2**30, "inputs": 2**30})
    [finding] = check_rule(SLUG, _filled(evidence.model_copy(update={"memory": weights})))
    assert finding.evidence["remedy"] is None
    assert "no automatic fix for a peak held by parameters" in SPEC.unmeasurable(finding, "cuda:0")
    gpt = saved_evidence("gpt_block")
    autocast = gpt.model_copy(update={"target": gpt.target.model_copy(update={"autocast": "bfloat16"}),
                                      "graph": None})
    [finding] = check_rule(SLUG, _filled(autocast))
    assert finding.evidence["remedy"] is None and SPEC.unmeasurable(finding, "cuda:0")


def test_the_verdict_is_on_the_peak_and_needs_steady_steps():
    assert memory_verdict([100, 100], [60, 60])[0] == "verified"
    assert memory_verdict([100, 100], [97, 97]) == ("no-gain", memory_verdict([100, 100], [97, 97])[1])
    assert "only 3.0%" in memory_verdict([100, 100], [97, 97])[1]
    assert "does not lower" in memory_verdict([100, 100], [120, 120])[1]
    assert memory_verdict([100, 120], [60, 60])[0] == "inconclusive"  # a peak that moves step to step


def test_a_memory_fix_is_not_timed_together_with_the_speedups():
    calls = []

    def measure_set(chosen, seconds):
        calls.append([f.slug for f in chosen])
        if chosen[0].slug == SLUG:
            return Verification(status="verified", memory=PeakMemoryAB(baseline_peak_bytes=[100], candidate_peak_bytes=[60],
                                                                       ratio=0.6, time_ratio=1.2))
        return Verification(status="verified", speedup=1.5, ci_low=1.4, ci_high=1.6)
    findings = [Finding(id="a", slug=SLUG, message="m"), Finding(id="b", slug="optimizer-foreach", message="m")]
    measured = measure_fixes(findings, measure_set, None)
    assert calls == [[SLUG], ["optimizer-foreach"]] and measured.combined.speedup == 1.5


def test_every_report_says_what_the_memory_fix_measured():
    report = assemble_report(Gathered(evidence=_filled(saved_evidence("gpt_block"))), RuleConfig.load())
    finding = next(f for f in report.findings if f.slug == SLUG)
    finding.verification = Verification(status="verified", samples=12, max_rel_error=0.0, tolerance=1e-4, memory=PeakMemoryAB(
        baseline_peak_bytes=[32 * 2**20] * 2, candidate_peak_bytes=[20 * 2**20] * 2, ratio=0.625, time_ratio=1.2,
        time_low=1.18, time_high=1.23))
    said = "peak 32 → 20 MB (0.62x); the step takes 1.20x as long [1.18-1.23]"
    assert describe_verification(finding.verification) == f"verified for memory: {said}, n=12"
    assert f"verified for memory: {said}" in render_markdown(report)
    assert said in render_html(report) and "fix verified for memory (0.62× the peak)" in render_html(report)


def test_a_steps_rise_is_the_allocators_count():
    held = torch.zeros(1024)

    def step():
        transient = torch.ones(2**20)  # 4 MB, freed before the next
        del transient
        return held.sum()
    rise = rise_of(step, torch.device("cpu"))
    assert 4 * 2**20 <= rise < 4 * 2**20 + 2**16
    model = torch.nn.Linear(64, 32)
    assert held_bytes((model, None, None), torch.device("cpu")) == (64 * 32 + 32) * 4


def _finding(**remedy) -> Finding:
    return Finding(id="memory", slug=SLUG, message="near capacity", evidence={"largest_kind": "activations", **remedy})


@pytest.mark.slow
def test_checkpointing_the_gpt_blocks_lowers_the_peak_with_the_same_gradients():
    result = verify_sample("gpt_block", _finding(remedy="checkpoint", blocks=["h.0", "h.1"], block_type="Block"), SLUG)
    assert result.status == "verified", result
    assert result.memory.ratio < 0.8 and result.max_rel_error <= 1e-4 and result.speedup is None
    assert max(result.memory.candidate_peak_bytes) < max(result.memory.baseline_peak_bytes)
    assert result.memory.time_ratio is not None and result.samples == 10


@pytest.mark.slow
def test_autocast_lowers_the_peak_of_a_step_whose_activations_hold_it():
    result = verify_sample("gpt_block", _finding(remedy="autocast", autocast_dtype="bfloat16"), SLUG)
    assert result.status == "verified", result
    assert result.memory.ratio < 0.9 and result.max_rel_error <= 0.05


@pytest.mark.slow
def test_an_audit_verifies_the_memory_fix_end_to_end(tmp_path):
    done = subprocess.run([sys.executable, "-m", "advisor", "audit", str(SAMPLES / "gpt_block.py"), "--set",
                           f"{SLUG}.min_share=0", "--pairs", "5", "--disable", "missing-amp", "--disable",
                           "optimizer-foreach", "--format", "json", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [finding] = [f for f in json.loads((tmp_path / "gpt_block.json").read_text())["findings"] if f["slug"] == SLUG]
    verification = finding["verification"]
    assert verification["status"] == "verified" and verification["speedup"] is None
    assert verification["memory"]["ratio"] < 0.8 and len(verification["memory"]["baseline_peak_bytes"]) == 2
    assert "verified for memory" in done.stdout


def test_a_reserve_the_step_does_not_fill_is_fragmentation_and_counts_toward_the_capacity():
    evidence = saved_evidence("gpt_block")
    peak = evidence.memory.peak_bytes
    reserved = evidence.memory.model_copy(update={"reserved_bytes": 2 * peak})  # half the reserve in free cached blocks
    assert reserved.cached_free_bytes == peak and reserved.held_bytes == 2 * peak
    [finding] = check_rule(SLUG, _filled(evidence, memory=reserved, share=0.93))  # the reserve at 93%, the peak at 47%
    assert "fragmentation" in finding.message and "expandable_segments:True" in finding.fix.summary
    assert finding.evidence["cached_free_bytes"] == peak and finding.evidence["remedy"] == "checkpoint"
    report = assemble_report(Gathered(evidence=_filled(evidence, memory=reserved)), RuleConfig.load())
    assert "of it in free cached blocks" in render_markdown(report) and "of it in free cached blocks" in render_html(report)
    filled = evidence.memory.model_copy(update={"reserved_bytes": int(peak * 1.1)})  # a reserve the step nearly fills
    [finding] = check_rule(SLUG, _filled(evidence, memory=filled))
    assert "fragmentation" not in finding.message and "expandable_segments" not in finding.fix.summary


class _WithSwitch(torch.nn.Module):
    """A model whose library gives it its own checkpointing switch, as transformers' PreTrainedModel does."""

    supports_gradient_checkpointing = True

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        pass


def test_a_model_with_its_own_checkpointing_switch_is_told_to_use_it():
    from advisor.capture.describe_target import checkpointing_switch

    switch = checkpointing_switch(_WithSwitch())
    assert switch.startswith("model.gradient_checkpointing_enable(") and checkpointing_switch(torch.nn.Linear(2, 2)) == ""
    evidence = saved_evidence("gpt_block")
    evidence = evidence.model_copy(update={"target": evidence.target.model_copy(update={"checkpointing_switch": switch})})
    [finding] = check_rule(SLUG, _filled(evidence))
    assert finding.evidence["switch"] == switch and switch in finding.fix.summary and switch in finding.fix.after
    assert finding.evidence["blocks"] == ["h.0", "h.1"]  # what the verification checkpoints, as the switch would
