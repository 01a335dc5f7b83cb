"""Capture failures that must not silence the rules: a model Dynamo cannot capture whole is
captured by parts; the step's FLOPs come from its trace, and a count that failed is said missing (trace JSON
repair: test_kineto.py)."""

from __future__ import annotations

import pytest
import torch

from advisor.capture.graph import capture_graph
from advisor.capture.parts import capture_by_parts
from advisor.capture.profile import export_trace, record_trace
from advisor.evidence import FlopCount
from advisor.trace.parse import parse_trace
from conftest import SAMPLES, audit, line_of
from devkit.saved_evidence import saved_evidence


class RefusesDispatchModes(torch.autograd.Function):
    """Like some extension ops: a backward that refuses to run under a tensor-dispatch mode
    (torch's FLOP counter is one), while the plain step runs fine."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        if torch.utils._python_dispatch._get_current_dispatch_mode() is not None:
            raise AssertionError("Expected gradient function to be set")
        return grad * 2


class Net(torch.nn.Module):
    """Called with keyword arguments only, as a Trainer calls a model (``model(**batch)``)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 48)

    def forward(self, *, input_ids=None, inputs_embeds=None):
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        return RefusesDispatchModes.apply(self.proj(inputs_embeds))


def _profiled_flops(step, tmp_path, **options) -> FlopCount:
    path = str(tmp_path / "step.trace.json.gz")
    record_trace(step, torch.device("cpu"), path, steps=2, warmup=1, **options)
    return FlopCount.of_trace(parse_trace(path))


def test_the_steps_flops_are_read_from_its_trace_whatever_its_model_refuses(tmp_path):
    """A keyword-only model whose backward refuses dispatch modes: what the profiler recorded of the real step is
    counted exactly (the forward's matmul with its bias, the weight's gradient), nothing called again."""
    model, x = Net(), torch.randn(16, 32)

    def step():
        model(inputs_embeds=x).sum().backward()
    counted = _profiled_flops(step, tmp_path)
    forward, weight_grad = 2 * 16 * 32 * 48 + 16 * 48, 2 * 48 * 16 * 32  # addmm (bias added), the weight's mm
    assert counted.method == "trace" and counted.note == ""
    assert counted.by_op == {"addmm": forward, "mm": weight_grad} and counted.total == forward + weight_grad


def test_a_trace_without_shapes_counts_nothing_and_says_why(tmp_path):
    model = torch.nn.Linear(32, 32)
    path = str(tmp_path / "plain.trace.json.gz")
    with torch.profiler.profile() as prof:  # record_shapes off: a trace recorded elsewhere, most often
        model(torch.randn(4, 32))
    export_trace(prof, path)
    counted = FlopCount.of_trace(parse_trace(path))
    assert counted.method == "none" and not counted.counted and counted.total == 0
    assert "without the operators' shapes" in counted.note


def test_a_count_that_failed_is_missing_never_a_zero_margin():
    """missing-amp on a step whose FLOPs were not counted: silent with the reason, and no margin of 0.0 GFLOP."""
    from advisor.rulekit.engine import load_rules, run_rules

    evidence = saved_evidence("missing_amp").model_copy(update={
        "flops": FlopCount(method="none", note="the trace was recorded without the operators' shapes")})
    runs = []
    findings, _ = run_rules(load_rules(), evidence, runs=runs)
    run = next(r for r in runs if r.slug == "missing-amp")
    assert run.status == "not run" and run.margin is None and "missing-amp" not in {f.slug for f in findings}
    assert "FLOPs were not counted (the trace was recorded without the operators' shapes)" in run.why
    counted = run_rules(load_rules(), saved_evidence("missing_amp"))[0]
    assert "missing-amp" in {f.slug for f in counted}  # the same evidence with its count: the finding


@pytest.mark.slow
def test_a_model_dynamo_cannot_capture_whole_is_captured_by_its_submodules():
    import importlib.util

    spec = importlib.util.spec_from_file_location("moe_eager_dispatch", SAMPLES / "moe_eager_dispatch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, inputs = module.get_model(), module.get_inputs()
    with pytest.raises(RuntimeError, match="captured no graph"):
        capture_graph(model, inputs)
    capture = capture_by_parts(model, inputs, "whole failed")
    assert capture.method == "dynamo-submodules" and "experts.0" in capture.note and "whole failed" in capture.note
    clones = [n for n in capture.calls() if n.target == "clone"]
    assert sorted(n.module_path for n in clones) == [f"experts.{i}" for i in range(4)]
    assert {n.line for n in clones} == {line_of(SAMPLES / "moe_eager_dispatch.py", "a copy for nothing")}
    assert len({n.id for n in capture.nodes}) == len(capture.nodes)  # ids stay unique across parts
    assert all(a in {n.id for n in capture.nodes} for n in capture.nodes for a in n.args)


@pytest.mark.slow
def test_a_graph_rewrite_that_torch_compile_cannot_reach_is_not_verified(tmp_path):
    path = SAMPLES / "moe_eager_dispatch.py"
    result = audit(path, tmp_path, verify=True, pairs=4)
    assert result.report.graph.method == "dynamo-submodules"
    [finding] = [f for f in result.report.findings if f.slug == "redundant-copy"]
    assert finding.verification.status == "not-verifiable-here"
    assert "no graph to change" in finding.verification.note
