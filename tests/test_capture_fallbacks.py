"""Capture failures that must not silence the rules: a model Dynamo cannot capture whole is
captured by parts; a FLOP counter that fails falls back; (trace JSON repair: test_kineto.py)."""

from __future__ import annotations

import pytest
import torch

from advisor.capture.flops import count_flops
from advisor.capture.graph import capture_graph
from advisor.capture.parts import capture_by_parts
from conftest import SAMPLES, audit, line_of


class RefusesDispatchModes(torch.autograd.Function):
    """Like some extension ops: a backward that refuses to run under a tensor-dispatch mode
    (FlopCounterMode is one), while the plain step runs fine."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        if torch.utils._python_dispatch._get_current_dispatch_mode() is not None:
            raise AssertionError("Expected gradient function to be set")
        return grad * 2


class Net(torch.nn.Module):
    def __init__(self, refuse_forward: bool = False):
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)
        self.refuse_forward = refuse_forward

    def forward(self, x):
        if self.refuse_forward and torch.utils._python_dispatch._get_current_dispatch_mode() is not None:
            raise AssertionError("no modes here either")
        return RefusesDispatchModes.apply(self.proj(x))


def _training_step(model: torch.nn.Module, x: torch.Tensor):
    def step():
        model(x).sum().backward()
    return step


def test_a_counter_failure_in_backward_falls_back_to_three_times_the_forward():
    model, x = Net(), torch.randn(16, 32)
    _training_step(model, x)()  # the step itself runs
    with torch.no_grad():
        forward_only = count_flops(lambda: model(x))
    counted = count_flops(_training_step(model, x), forward=lambda: model(x))
    assert counted.method == "forward x3" and "counting the whole step failed (AssertionError" in counted.note
    assert forward_only.total == 2 * 16 * 32 * 32 and counted.total == 3 * forward_only.total


def test_a_counter_that_fails_everywhere_records_no_count_and_why():
    model, x = Net(refuse_forward=True), torch.randn(16, 32)
    counted = count_flops(_training_step(model, x), forward=lambda: model(x))
    assert counted.method == "none" and counted.total == 0
    assert "the forward alone failed too" in counted.note


def test_a_healthy_step_is_counted_whole():
    model = torch.nn.Linear(32, 32)
    counted = count_flops(lambda: model(torch.randn(16, 32)).sum().backward())
    forward = 2 * 16 * 32 * 32
    assert counted.method == "step" and counted.note == "" and counted.total == 2 * forward  # + weight grad only


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
