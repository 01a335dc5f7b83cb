"""tensor-creation-in-step (ADV119): Constant tensors rebuilt every step: masks, position ids, lookup tables. Its
cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
import torch

from advisor.rules.model.tensor_creation_in_step import fold_constants
from conftest import SAMPLES, check_rule, line_of, share_finding, slugs
from devkit.saved_evidence import as_cuda
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("tensor-creation-in-step")


@pytest.mark.slow
def test_constants_rebuilt_every_step(sample_audit):
    finding = share_finding(sample_audit("constant_masks"), "tensor-creation-in-step")
    assert "tensor-creation-in-step" not in slugs(sample_audit("manual_attention"))  # a registered buffer
    if finding is None:
        return  # measured beside another job: silent, and marked unreliable (share_finding)
    path = SAMPLES / "constant_masks.py"
    assert [loc.line for loc in finding.locations] == [line_of(path, "torch.arange(T)"), line_of(path, "torch.triu(")]
    assert finding.evidence["elements"] == 512 + 512 * 512  # position ids and the mask, as used
    assert finding.evidence["share_of_step"] >= 0.02


@pytest.mark.slow
def test_small_constants_are_silent_on_cpu_and_reported_on_cuda(sample_audit):
    result = sample_audit("gpt_block")  # torch.arange(T) for positions: microseconds on a CPU
    assert "tensor-creation-in-step" not in slugs(result)
    [finding] = check_rule("tensor-creation-in-step", as_cuda(result.evidence))
    assert finding.evidence["lines"] == 1


def test_constant_folding_rewrite_is_exact_and_leaves_random_ops():
    class Net(torch.nn.Module):
        def forward(self, x):
            mask = torch.triu(torch.full((8, 8), float("-inf")), diagonal=1)
            noise = torch.rand(8, 8)  # random: must be drawn every call
            return x + mask.clamp(min=-1) + noise * 0

    x = torch.randn(8, 8)
    torch._dynamo.reset()
    graphs = []
    compiled = torch.compile(Net(), backend=lambda gm, ex: graphs.append(gm) or fold_constants(gm, ex))
    assert torch.equal(compiled(x), Net()(x))
    names = {getattr(n.target, "__name__", n.target) for n in graphs[0].graph.nodes}
    assert "rand" in names and "triu" not in names and "full" not in names
    torch._dynamo.reset()
