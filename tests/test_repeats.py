"""Runs of identical blocks traced twice and copied (capture/repeats.py): the graph must be the one the whole
capture gives, node for node, and the copying must stand down wherever a block would not trace as its neighbour."""

import copy
import importlib.util
import os

import pytest
import torch
from torch import nn

from advisor.capture.graph import _dynamo_capture, capture_graph
from advisor.capture.repeats import expand, find_runs, truncated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sample(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "samples", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Block(nn.Module):
    def __init__(self, width: int = 16, layer: int = 0, stride: int = 1):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)
        self.layer = layer
        self.register_buffer("scale", torch.ones(width))

    def forward(self, x):
        return x + self.linear(self.norm(x)) * self.scale


class Stack(nn.Module):
    def __init__(self, blocks: list[nn.Module], width: int = 16):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class EveryOutput(Stack):  # keeps each block's output, as hidden-state lists do
    def forward(self, x):
        x = self.embed(x)
        outputs = []
        for block in self.blocks:
            x = block(x)
            outputs.append(x)
        return self.head(x), outputs


class Indexed(Stack):  # indexes its blocks by a count of its own: a shorter list fails
    def forward(self, x):
        x = self.embed(x)
        for index in range(5):
            x = self.blocks[index](x)
        return self.head(x)


class PerBlockInput(Stack):  # each block reads its own slice of an outside tensor
    def forward(self, x):
        x = self.embed(x)
        gates = torch.sigmoid(x.sum(-1, keepdim=True)).unbind(0)
        for index, block in enumerate(self.blocks):
            x = block(x) * gates[index % len(gates)]
        return self.head(x)


class ByLayer(Block):  # traces differently by its position
    def forward(self, x):
        y = super().forward(x)
        return y.relu() if self.layer % 2 else y


class Halving(nn.Module):  # identical blocks whose output is half their input: each block sees another shape
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


def _nodes(capture) -> list:
    positions = {node.id: index for index, node in enumerate(capture.nodes)}
    return [(node.model_dump(exclude={"id", "args"}), [positions[arg] for arg in node.args]) for node in capture.nodes]


def _copied(model: nn.Module, inputs) -> bool:
    """Whether the copying stood in for the whole capture (a capture of the truncated model, expanded)."""
    runs = find_runs(model)
    if not runs:
        return False
    with truncated(model, runs):
        try:
            capture = _dynamo_capture(model, (inputs,), {})
        except Exception:  # noqa: BLE001 - the truncated forward fails: the whole capture stands
            return False
    return capture.graph_count == 1 and not capture.breaks and expand(capture.nodes, runs) is not None


def _same_as_whole(model: nn.Module, inputs) -> None:
    whole = _dynamo_capture(copy.deepcopy(model), (inputs,), {})
    assert _nodes(capture_graph(copy.deepcopy(model), inputs)) == _nodes(whole)


@pytest.mark.slow
@pytest.mark.parametrize("layers", [3, 6])
def test_a_gpt_of_identical_layers_is_copied_into_the_whole_graph(layers):
    gpt_block = _sample("gpt_block")
    model, inputs = gpt_block.GPT(layers=layers), gpt_block.get_inputs()
    assert [(run.path, run.first, run.last) for run in find_runs(model)] == [("h", 0, layers - 1)]
    assert _copied(copy.deepcopy(model), inputs)
    _same_as_whole(model, inputs)
    paths = {node.module_path for node in capture_graph(copy.deepcopy(model), inputs).nodes}
    assert {f"h.{index}.attn.qkv" for index in range(layers)} <= paths  # each layer under its own name


@pytest.mark.slow
def test_runs_inside_a_sequential_after_a_different_first_block():
    model = nn.Sequential(nn.Linear(16, 16), *[Block() for _ in range(4)], nn.Linear(16, 2))
    assert [(run.path, run.first, run.last) for run in find_runs(model)] == [("", 1, 4)]
    inputs = torch.randn(2, 16)
    assert _copied(copy.deepcopy(model), inputs)
    _same_as_whole(model, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("model, inputs", [
    (EveryOutput([Block() for _ in range(4)]), torch.randn(2, 16)),
    (Indexed([Block() for _ in range(5)]), torch.randn(2, 16)),
    (PerBlockInput([Block() for _ in range(4)]), torch.randn(2, 16)),
    (nn.Sequential(*[Halving() for _ in range(4)]), torch.randn(1, 4, 32, 32)),
], ids=["every-output", "indexed", "per-block-input", "shape-changing"])
def test_copying_stands_down_where_a_block_would_not_trace_as_its_neighbour(model, inputs):
    assert find_runs(model)  # the blocks look alike; only the capture tells
    assert not _copied(copy.deepcopy(model), inputs)
    _same_as_whole(model, inputs)


def test_blocks_that_differ_are_no_run():
    by_layer = Stack([ByLayer(layer=index) for index in range(4)])
    assert find_runs(by_layer) == []  # an attribute the forward may read
    hooked = Stack([Block() for _ in range(4)])
    hooked.blocks[2].register_forward_hook(lambda module, args, output: output * 2)
    assert [(run.first, run.last) for run in find_runs(hooked)] == []  # 0-1 and 3 alone: too short
    masked = Stack([Block() for _ in range(4)])
    masked.blocks[3].scale.mul_(2)
    assert [(run.first, run.last) for run in find_runs(masked)] == [(0, 2)]  # a buffer's values
    tied = Stack([Block() for _ in range(4)])
    tied.blocks[1].linear.weight = tied.blocks[0].linear.weight
    assert find_runs(tied) == []  # a parameter held twice is lifted once
    shared = Block()
    assert find_runs(Stack([shared, shared, shared])) == []
    assert [(run.path, run.first, run.last) for run in find_runs(Stack([Block() for _ in range(3)]))] \
        == [("blocks", 0, 2)]
    assert find_runs(Stack([Block() for _ in range(2)])) == []


def test_truncation_is_undone():
    model = Stack([Block() for _ in range(5)])
    before = list(model.blocks)
    with truncated(model, find_runs(model)):
        assert len(model.blocks) == 2
    assert list(model.blocks) == before
