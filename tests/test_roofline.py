"""The roofline: the machine's roofs measured and cached (capture/calibrate.py), each operator group's work from
its recorded shapes against them (trace/roofline.py), the below-roof rule, and the report's chart and table.
Over the saved evidence of real audits: gpt_block (its matmuls near their roof) and narrow_heads (attention split
into heads of 4 dimensions, far below it)."""

from __future__ import annotations

import json

import pytest
import torch

import advisor
from advisor.assembly.build import assemble_report
from advisor.gathered import Gathered
from advisor.machine.peaks import MachinePeaks, published_peaks
from advisor.report.html import render_html
from advisor.report.markdown import render_markdown
from advisor.report.roofline_chart import roofline_chart
from advisor.rulekit.engine import RuleConfig
from advisor.trace.model import ShapedOp
from advisor.trace.roofline import op_work, operator_rates
from conftest import SAMPLES
from devkit.saved_evidence import saved_evidence

RULES = RuleConfig.load()
PEAKS = MachinePeaks(device="test CPU", flops_per_s={"float32": 100e9, "bfloat16": 400e9}, bandwidth_bytes_per_s=10e9)


def _op(name: str, dims: list, types: list | None = None, constants: list | None = None) -> ShapedOp:
    types = types or ["float"] * len(dims)
    return ShapedOp(name=name, ts=0.0, dur=10.0, tid=1, input_dims=dims, input_types=types,
                    concrete_inputs=constants or [""] * len(dims))


def test_the_work_of_an_operator_comes_from_its_input_shapes():
    assert op_work(_op("aten::mm", [[64, 32], [32, 16]])) == (2 * 64 * 32 * 16, (64 * 32 + 32 * 16 + 64 * 16) * 4, "float32")
    flops, moved, dtype = op_work(_op("aten::addmm", [[16], [64, 32], [32, 16], [], []],
                                      ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"]))
    assert flops == 2 * 64 * 32 * 16 + 64 * 16 and moved == (16 + 64 * 32 + 32 * 16 + 64 * 16) * 2 and dtype == "bfloat16"
    assert op_work(_op("aten::bmm", [[8, 4, 5], [8, 5, 6]]))[0] == 2 * 8 * 4 * 5 * 6
    attention = op_work(_op("aten::_scaled_dot_product_flash_attention_for_cpu", [[2, 4, 128, 32]] * 3))
    assert attention[0] == 2 * 2 * 4 * 128 * 128 * (32 + 32)
    backward = op_work(_op("aten::_scaled_dot_product_flash_attention_for_cpu_backward", [[2, 4, 128, 32]] * 4))
    assert backward[0] == 2 * attention[0]
    # a 3x3 convolution, stride 1, padding 1: the output keeps the input's 8x8
    conv = _op("aten::convolution", [[1, 3, 8, 8], [16, 3, 3, 3], [16], [], [], [], [], [], []],
               ["float"] * 3 + ["ScalarList"] * 3 + ["Scalar", "ScalarList", "Scalar"],
               ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    assert op_work(conv)[0] == 2 * (1 * 16 * 8 * 8) * (3 * 3 * 3)
    assert op_work(_op("aten::gelu", [[10, 20], []], ["float", ""]))[:2] == (200, 200 * 4 * 2)
    assert op_work(_op("aten::copy_", [[10, 20], [10, 20]]))[0] == 0  # it moves, it does not compute
    assert op_work(_op("aten::add", [[], []], ["Scalar", "Scalar"])) is None  # no tensor


def test_each_operator_group_of_the_recorded_gpt_is_held_to_its_roof():
    evidence = saved_evidence("gpt_block")
    assert evidence.peaks is not None and evidence.peaks.flops_per_s["float32"] > 0
    rates = operator_rates(evidence.trace, evidence.peaks)
    mlp = [r for r in rates if r.op == "aten::addmm" and r.line == _line("gpt_block", "return x + self.mlp(")]
    assert mlp and mlp[0].bound == "compute" and 0.05 < mlp[0].efficiency <= 1.0
    assert mlp[0].roof_flops_per_s == min(evidence.peaks.flops_for("float32"), mlp[0].intensity * evidence.peaks.bandwidth_bytes_per_s)
    backward = [r for r in rates if r.backward and r.op == "aten::mm"]
    assert backward and all(r.line for r in backward)  # a backward at its forward's line
    assert 0.3 < sum(r.share_of_step for r in rates) <= 1.0
    assert rates == sorted(rates, key=lambda r: r.us_per_step, reverse=True)


def _line(sample: str, text: str) -> int:
    lines = (SAMPLES / f"{sample}.py").read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def test_the_report_carries_the_roofline_in_json_html_and_markdown():
    report = assemble_report(Gathered(evidence=saved_evidence("gpt_block")), RULES)
    roofline = json.loads(report.model_dump_json())["roofline"]
    assert roofline["peaks"]["flops_per_s"]["float32"] > 0 and roofline["operators"][0]["achieved_flops_per_s"] > 0
    chart = roofline_chart(report.roofline)
    plotted = [r for r in report.roofline.operators if r.intensity]
    assert len(chart.points) == len(plotted) and len(chart.roofs) == len(report.roofline.peaks.flops_per_s)
    assert all(chart.left <= p.x <= chart.right and chart.top <= p.y <= chart.bottom for p in chart.points)
    page = render_html(report)
    assert 'class="chart roofline"' in page and page.count('class="operator"') == len(plotted)
    assert "Operators against this machine's roofline" in render_markdown(report)


@pytest.mark.slow
def test_quiet_roofs_are_cached_with_when_and_how_they_were_measured_and_read_back(tmp_path, monkeypatch):
    """Measured with the machine watched: a quiet measurement is cached with its time and conditions, and the next
    audit reads it; one the suite's own load made contended (measured again within the budget) is not cached."""
    from advisor.capture.calibrate import cache_key, machine_peaks

    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path))
    cpu = torch.device("cpu")
    measured = machine_peaks(cpu, "test CPU")
    assert measured.seconds > 0 and measured.threads == torch.get_num_threads() and measured.measured_at
    assert measured.flops_per_s["float32"] > 1e8 and measured.bandwidth_bytes_per_s > 1e8
    assert measured.conditions is not None and measured.machine == cache_key(cpu, "test CPU")
    cache = tmp_path / "peaks.json"
    if measured.contended:  # the machine was busy throughout: this audit's roofs only
        assert measured.source == "contended" and not cache.exists() and "not cached" in measured.provenance()
        return
    assert measured.source == "measured" and list(json.loads(cache.read_text())) == [measured.machine]
    again = machine_peaks(cpu, "test CPU")
    assert again.source == "cached" and again.flops_per_s == measured.flops_per_s
    assert again.measured_at == measured.measured_at and again.conditions == measured.conditions
    assert "cached" in again.provenance() and ("quiet" in again.provenance()) == (measured.conditions.others_cores is not None)


@pytest.mark.slow
def test_roofs_measured_beside_busy_processes_on_every_core_are_used_once_and_never_cached(tmp_path, monkeypatch):
    import contextlib
    import os

    from advisor.capture.calibrate import machine_peaks
    from devkit.contention import busy_loop

    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path))
    with contextlib.ExitStack() as stack:
        for cpu in sorted(os.sched_getaffinity(0)):
            stack.enter_context(busy_loop(cpu))
        peaks = machine_peaks(torch.device("cpu"), "busy CPU")
    if any("CPU shares" in item or "/proc" in item for item in peaks.conditions.unreadable):
        pytest.skip(f"the machine's CPU shares cannot be read here: {peaks.conditions.unreadable}")
    assert peaks.source == "contended" and peaks.contended and "other processes used" in peaks.contended[0]
    assert peaks.flops_per_s["float32"] > 0 and not (tmp_path / "peaks.json").exists()


def test_the_roofs_key_holds_what_they_depend_on(monkeypatch):
    """Another instruction set (an emulated one among them), torch or thread count is another machine's roofs."""
    from advisor.capture.calibrate import cache_key

    cpu = torch.device("cpu")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)  # a run emulating another ISA sets it
    plain = cache_key(cpu, "A CPU")
    assert plain.startswith(f"A CPU|{torch.backends.cpu.get_cpu_capability()}|torch {torch.__version__}|threads ")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert cache_key(cpu, "A CPU") != plain and "oneDNN up to AVX2" in cache_key(cpu, "A CPU")


def test_published_peaks_name_the_gpu_by_its_most_specific_key():
    assert published_peaks("NVIDIA H100 PCIe")[1] == 2.0e12
    assert published_peaks("NVIDIA H100 80GB HBM3")[1] == 3.35e12
    assert published_peaks("NVIDIA A100-SXM4-80GB")[1] == 2.039e12
    assert published_peaks("Intel(R) Xeon(R) Platinum") is None


@pytest.mark.slow
def test_an_audit_of_the_gpt_sample_carries_its_roofline_and_memory(tmp_path):
    from advisor.commands.audit import AuditOptions, run_audit

    result = run_audit(AuditOptions(model_file=str(SAMPLES / "gpt_block.py"), out_dir=str(tmp_path), verify=False))
    for suffix in ("json", "html"):
        advisor.save(result.report, str(tmp_path / f"gpt_block.{suffix}"))
    saved = json.loads((tmp_path / "gpt_block.json").read_text())
    assert saved["roofline"]["peaks"]["source"] in ("measured", "cached", "contended") and saved["roofline"]["operators"]
    assert {"parameters", "gradients", "optimizer state", "activations"} <= set(saved["memory"]["kinds"])
    page = (tmp_path / "gpt_block.html").read_text()
    assert 'id="roofline"' in page and 'id="memory"' in page
    from advisor.capture.memory import LARGER_BATCH_FACTOR, LARGER_BATCH_MOST_S, LARGER_BATCH_STEPS, LARGER_BATCH_WARMUP

    larger, step_ms = result.report.memory.larger_batch, result.evidence.timing.median_ms
    needed_s = (LARGER_BATCH_STEPS + LARGER_BATCH_WARMUP) * LARGER_BATCH_FACTOR * step_ms / 1000
    if needed_s > LARGER_BATCH_MOST_S:  # a slow machine's step: the larger batch is not measured, by its budget
        assert larger is None
    else:
        assert larger.factor == 2 and larger.batch_size == result.evidence.target.batch_size
        assert larger.step_ms == round(step_ms, 4) and larger.samples_per_s_ratio > 0
