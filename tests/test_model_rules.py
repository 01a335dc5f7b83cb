"""The model-layer rules of the pack: each against its sample, healthy models and look-alikes.

GPU-only rules (misaligned-dims) are checked on the evidence a CPU audit really captured, once as
it is ("not applicable here") and once with the device recorded as CUDA.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from advisor.capture.graph import capture_graph
from advisor.rulekit.rule import Severity
from advisor.rules.model.manual_attention.sdpa_rewrite import SdpaRewrite, use_sdpa
from advisor.rules.model.tensor_creation_in_step import fold_constants
from advisor.workload.feed import BATCHES_AHEAD
from advisor.workload.target import load_target
from conftest import SAMPLES, audit, check_rule, line_of, only_finding, share_finding, slugs, verify_sample, write_model
from devkit.saved_evidence import as_cuda

# --- manual-attention -------------------------------------------------------------------------

@pytest.mark.slow
def test_hand_written_attention_is_found_and_sdpa_is_verified(sample_audit):
    finding = only_finding(sample_audit("manual_attention"), "manual-attention")
    path = SAMPLES / "manual_attention.py"
    assert finding.evidence["blocks"] == 2 and finding.evidence["score_shape"] == [4, 4, 256, 256]
    assert finding.evidence["causal_mask"] is True  # a registered tril buffer: capture read its values
    assert [(loc.line, loc.count_per_step) for loc in finding.locations] == [(line_of(path, "F.softmax(att"), 2)]
    assert "is_causal=True" in finding.fix.summary
    verdict = verify_sample("manual_attention", finding, "manual-attention")
    assert verdict.status in ("verified", "no-gain", "slower", "inconclusive") and verdict.max_rel_error <= 1e-4


def test_sdpa_rewrite_keeps_scale_and_masks_exact():
    class Attention(torch.nn.Module):
        def forward(self, q, k, v, keep):
            scores = torch.matmul(q, k.transpose(2, 3)) / 8.0
            scores = scores + torch.where(keep, 0.0, float("-inf"))  # an additive float mask
            return torch.softmax(scores, dim=-1) @ v

    q, k, v = (torch.randn(2, 3, 16, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    keep = torch.rand(16, 16, generator=torch.Generator().manual_seed(3)) > 0.3
    keep |= torch.eye(16, dtype=torch.bool)
    expected = Attention()(q, k, v, keep)
    torch._dynamo.reset()
    rewritten = []
    compiled = torch.compile(Attention(), backend=lambda gm, ex: rewritten.append(gm) or use_sdpa(gm, ex))
    assert torch.allclose(compiled(q, k, v, keep), expected, atol=1e-5)
    names = [getattr(n.target, "__name__", n.target) for n in rewritten[0].graph.nodes]
    assert "scaled_dot_product_attention" in names and "softmax" not in names
    [sdpa] = [n for n in rewritten[0].graph.nodes if getattr(n.target, "__name__", "") == "scaled_dot_product_attention"]
    assert sdpa.kwargs["is_causal"] is False and sdpa.kwargs["attn_mask"] is not None  # a random mask stays explicit
    torch._dynamo.reset()


def test_a_causal_buffer_mask_becomes_is_causal():
    import sys

    sys.path.insert(0, str(SAMPLES))
    import manual_attention  # noqa: E402 - the bundled sample, as a live model

    model, x = manual_attention.get_model(), manual_attention.get_inputs()
    torch._dynamo.reset()
    rewritten = []
    compiled = torch.compile(model, backend=lambda gm, ex: rewritten.append(gm) or use_sdpa(gm, ex))
    assert torch.allclose(compiled(x), model(x), atol=1e-5)
    calls = [n.kwargs for gm in rewritten for n in gm.graph.nodes
             if getattr(n.target, "__name__", "") == "scaled_dot_product_attention"]
    assert [(c["is_causal"], c["attn_mask"]) for c in calls] == [(True, None), (True, None)]
    torch._dynamo.reset()


@pytest.mark.slow
def test_hf_eager_attention_is_found_as_causal_and_verified_as_is_causal(sample_audit):
    finding = only_finding(sample_audit("hf_eager_attention"), "manual-attention")
    path = SAMPLES / "hf_eager_attention.py"
    assert finding.evidence["blocks"] == 2 and finding.evidence["causal_mask"] is True  # a bool tril buffer
    assert [loc.line for loc in finding.locations] == [line_of(path, "SOFTMAX LINE")]
    assert "is_causal=True" in finding.fix.summary
    verdict = verify_sample("hf_eager_attention", finding, "manual-attention")
    assert verdict.max_rel_error <= 1e-4 and "2 block(s) as SDPA(is_causal=True)" in verdict.note


@pytest.mark.slow
def test_bloom_attention_is_found_at_its_softmax_and_its_fix_keeps_the_bias_and_the_mask(sample_audit):
    finding = only_finding(sample_audit("alibi_attention"), "manual-attention")
    path = SAMPLES / "alibi_attention.py"
    assert finding.evidence["blocks"] == 2 and finding.evidence["score_bias"] is True
    assert [loc.line for loc in finding.locations] == [line_of(path, "F.softmax(weights")]
    verdict = verify_sample("alibi_attention", finding, "manual-attention")
    assert verdict.max_rel_error <= 1e-4 and "2 block(s) as SDPA(attn_mask=...)" in verdict.note


@pytest.mark.slow
def test_einsum_attention_with_an_additive_padding_mask_keeps_the_mask(sample_audit):
    finding = only_finding(sample_audit("einsum_attention"), "manual-attention")
    assert finding.evidence["blocks"] == 2 and finding.evidence["causal_mask"] is False
    verdict = verify_sample("einsum_attention", finding, "manual-attention")
    assert verdict.max_rel_error <= 1e-4 and "2 block(s) as SDPA(attn_mask=...)" in verdict.note


def test_baddbmm_scores_with_alpha_and_a_bias_become_sdpa_exactly():
    class Attention(torch.nn.Module):
        def forward(self, q, k, v, bias):  # (batch*heads, T, d), as Bloom-style code writes it
            scores = torch.baddbmm(bias, q, k.transpose(1, 2), beta=1.0, alpha=0.125)
            return torch.bmm(torch.softmax(scores, dim=-1).to(v.dtype), v)

    q, k, v = (torch.randn(6, 16, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    bias = torch.randn(6, 1, 16, generator=torch.Generator().manual_seed(4))  # an ALiBi-like additive bias
    expected = Attention()(q, k, v, bias)
    torch._dynamo.reset()
    rewrite, rewritten = SdpaRewrite(), []
    compiled = torch.compile(Attention(), backend=lambda gm, ex: rewritten.append(gm) or rewrite(gm, ex))
    assert torch.allclose(compiled(q, k, v, bias), expected, atol=1e-5)
    [sdpa] = [n for n in rewritten[0].graph.nodes if getattr(n.target, "__name__", "") == "scaled_dot_product_attention"]
    assert sdpa.kwargs["scale"] == 0.125 and sdpa.kwargs["attn_mask"] is not None
    assert rewrite.describe() == "1 block(s) as SDPA(attn_mask=...)"
    torch._dynamo.reset()


class BloomStyle(torch.nn.Module):
    """BLOOM's attention on (batch * heads, T, d) operands: the ALiBi bias into baddbmm with the queries and keys by
    keyword, the scores viewed (batch, heads, T, T) to be causally masked, a float32 softmax cast back, dropout, the
    weights viewed back for bmm with the values; ``return_weights`` hands the weights to the caller as well."""

    def __init__(self, heads: int = 3, return_weights: bool = False):
        super().__init__()
        self.heads, self.return_weights = heads, return_weights
        self.dropout = torch.nn.Dropout(0.1)

    def forward(self, q, k, v, alibi, causal):
        batch_heads, length, _ = q.shape
        scores = alibi.baddbmm(batch1=q, batch2=k.transpose(1, 2), beta=1.0, alpha=0.125)
        scores = scores.view(batch_heads // self.heads, self.heads, length, length)
        weights = torch.masked_fill(scores, causal, torch.finfo(scores.dtype).min)
        probs = self.dropout(torch.nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype))
        out = torch.bmm(probs.view(batch_heads, length, length), v)
        return (out, probs) if self.return_weights else out


def _bloom_inputs():
    q, k, v = (torch.randn(6, 16, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    alibi = torch.randn(6, 1, 16, generator=torch.Generator().manual_seed(4))
    return q, k, v, alibi, torch.ones(16, 16, dtype=torch.bool).triu(1)[None, None]


def test_bloom_attention_becomes_sdpa_with_its_bias_and_causal_mask_as_one_float_mask():
    inputs = _bloom_inputs()
    model = BloomStyle().eval()
    expected = model(*inputs)
    torch._dynamo.reset()
    rewrite, rewritten = SdpaRewrite(), []
    compiled = torch.compile(model, backend=lambda gm, ex: rewritten.append(gm) or rewrite(gm, ex))
    assert torch.allclose(compiled(*inputs), expected, atol=1e-5)
    names = [getattr(n.target, "__name__", n.target) for n in rewritten[0].graph.nodes]
    assert "folded_attention" in names and "softmax" not in names and "baddbmm" not in names
    assert rewrite.describe() == "1 block(s) as SDPA(attn_mask=...)"
    torch._dynamo.reset()
    found = check_rule("manual-attention", _graph_evidence(model, inputs))
    assert len(found) == 1 and found[0].evidence["score_bias"]
    assert "the scores' bias as a float mask" in found[0].fix.summary


def test_attention_whose_weights_go_back_to_the_caller_is_left_alone():
    inputs = _bloom_inputs()
    assert check_rule("manual-attention", _graph_evidence(BloomStyle(return_weights=True).eval(), inputs)) == []


def _graph_evidence(model, inputs):
    from advisor.evidence import Evidence, TargetInfo

    capture = capture_graph(model, inputs)
    torch._dynamo.reset()
    return Evidence(target=TargetInfo(model_file="bloom.py"), graph=capture)


def test_einsum_attention_on_batch_seq_heads_dim_tensors_becomes_permuted_sdpa_exactly():
    class Attention(torch.nn.Module):
        def forward(self, q, k, v, additive):  # [batch, seq, heads, dim]: the projections only viewed
            scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * 8 ** -0.5
            return torch.einsum("bhqk,bkhd->bqhd", (scores + additive).softmax(-1), v)

    q, k, v = (torch.randn(2, 16, 3, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    additive = torch.where(torch.rand(2, 1, 1, 16, generator=torch.Generator().manual_seed(3)) > 0.2, 0.0, -1e9)
    expected = Attention()(q, k, v, additive)
    torch._dynamo.reset()
    rewrite, rewritten = SdpaRewrite(), []
    compiled = torch.compile(Attention(), backend=lambda gm, ex: rewritten.append(gm) or rewrite(gm, ex))
    assert torch.allclose(compiled(q, k, v, additive), expected, atol=1e-5)
    names = [getattr(n.target, "__name__", n.target) for n in rewritten[0].graph.nodes]
    assert "scaled_dot_product_attention" in names and "einsum" not in names and "softmax" not in names
    assert rewrite.describe() == "1 block(s) as SDPA(attn_mask=...)"
    torch._dynamo.reset()


def test_einsum_roles_follow_the_letters_not_their_positions():
    from advisor.rulekit.patterns import einsum_role

    assert [einsum_role(e) for e in ("bhqd,bhkd->bhqk", "bqhd,bkhd->bhqk", "bqd,bkd->bqk")] == ["scores"] * 3
    assert [einsum_role(e) for e in ("bhqk,bhkd->bhqd", "bhqk,bkhd->bqhd")] == ["output"] * 2
    # softmax over the queries, a contraction of two dimensions, a broadcast: no attention
    assert [einsum_role(e) for e in ("bhqd,bhkd->bhkq", "bqhd,bkhd->bqk", "bqd,kd->bqk")] == [None, None, None]


def test_a_scale_after_the_mask_is_left_as_written_and_says_why():
    class Attention(torch.nn.Module):
        def forward(self, q, k, v, keep):
            scores = (q @ k.transpose(-2, -1)).masked_fill(~keep, float("-inf")) * 0.125
            return torch.softmax(scores, dim=-1) @ v

    q, k, v = (torch.randn(2, 16, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    keep = torch.ones(16, 16, dtype=torch.bool).tril()
    torch._dynamo.reset()
    rewrite = SdpaRewrite()
    torch.compile(Attention(), backend=rewrite)(q, k, v, keep)
    assert rewrite.describe() == "1 block(s) left as written (a scale after the mask)"
    torch._dynamo.reset()


@pytest.mark.slow
def test_multihead_attention_modules_are_not_hand_written_attention(tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch import nn
        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.weighted = nn.MultiheadAttention(64, 4, batch_first=True)  # need_weights=True by default
                self.fast = nn.MultiheadAttention(64, 4, batch_first=True)
                self.layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
            def forward(self, x):
                y, _ = self.weighted(x, x, x)
                z, _ = self.fast(y, y, y, need_weights=False)
                return self.layer(z)
        def get_model(): return Encoder().eval()
        def get_inputs(): return torch.randn(2, 64, 64)
    """)
    assert "manual-attention" not in slugs(audit(path, tmp_path))


@pytest.mark.slow
def test_attention_that_never_runs_or_whose_weights_are_used_is_not_reported(tmp_path, sample_audit):
    path = write_model(tmp_path, """
        import math, torch
        from torch import nn
        import torch.nn.functional as F
        class Attention(nn.Module):
            def __init__(self, use_sdpa=True):
                super().__init__()
                self.use_sdpa = use_sdpa
            def forward(self, q, k, v):
                if self.use_sdpa:
                    return F.scaled_dot_product_attention(q, k, v), None
                att = F.softmax((q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1)), dim=-1)  # never runs
                return att @ v, None
        class Probing(nn.Module):
            def forward(self, q, k, v):
                att = F.softmax(q @ k.transpose(-2, -1), dim=-1)
                return att @ v, att  # the weights are returned: SDPA cannot replace this
        class Both(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = Attention(), Probing()
            def forward(self, q, k, v):
                out, weights = self.b(q, k, v)
                return self.a(q, k, v)[0] + out, weights
        def get_model(): return Both()
        def get_inputs(): return tuple(torch.randn(2, 2, 32, 16) for _ in range(3))
    """)
    assert "manual-attention" not in slugs(audit(path, tmp_path))
    for sample in ("gpt_block", "moe_layer"):  # SDPA; a softmax router that feeds no matmul
        assert "manual-attention" not in slugs(sample_audit(sample))


# --- channels-last ----------------------------------------------------------------------------

@pytest.mark.slow
def test_layout_copies_inside_a_library_model_are_no_advice(tmp_path):
    """A CNN from an installed library (site-packages) whose forward shuffles its own layout: the copies run
    in no line of the user's, who has nothing there to change (the user's line is only the model's call)."""
    library = tmp_path / "site-packages" / "visionlib"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class SmallNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = nn.Conv2d(3, 8, 3, padding=1)
                self.head = nn.Linear(8, 10)

            def forward(self, x):
                x = self.stem(x)
                for _ in range(4):  # the library's own NHWC round trips
                    x = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2).contiguous()
                return self.head(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))
    """), encoding="utf-8")
    path = write_model(tmp_path, f"""
        import sys
        sys.path.insert(0, {str(library.parent)!r})
        import torch
        from visionlib import SmallNet

        def get_model():
            torch.manual_seed(0)
            return SmallNet()

        def get_inputs():
            return torch.randn(8, 3, 96, 96)

        def get_optimizer(model):
            return torch.optim.SGD(model.parameters(), lr=0.01)
    """)
    result = audit(path, tmp_path / "out")
    assert result.report.errors == [] and "non-contiguous" not in slugs(result), [f.message for f in result.report.findings]
    assert all(f.severity in (Severity.LOW, Severity.INFO) for f in result.report.findings
               for loc in f.locations if loc.file and "site-packages" in loc.file)


@pytest.mark.slow
def test_nchw_conv_nets_get_channels_last(sample_audit):
    assert "channels-last" not in slugs(sample_audit("conformer_conv"))  # Conv1d: no channels_last for 3-D
    finding = share_finding(sample_audit("conv_bias_bn"), "channels-last")
    if finding is None:
        return  # measured beside another job: silent, and marked unreliable (share_finding)
    assert finding.evidence["nchw_conv_layers"] == 2 and finding.evidence["conv_share_of_step"] >= 0.25
    assert finding.severity == Severity.LOW  # a CPU run: the verification measures the gain


@pytest.mark.slow
def test_a_conv_net_already_in_channels_last_is_left_alone(tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch import nn
        def get_model():
            net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1))
            return net.eval().to(memory_format=torch.channels_last)
        def get_inputs():
            return torch.randn(8, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    """)
    result = audit(path, tmp_path)
    assert result.evidence.graph is not None and "channels-last" not in slugs(result)


# --- redundant-copy ---------------------------------------------------------------------------

@pytest.mark.slow
def test_redundant_clones_and_no_op_contiguous(sample_audit):
    finding = only_finding(sample_audit("redundant_clones"), "redundant-copy")
    path = str(SAMPLES / "redundant_clones.py")
    assert finding.evidence["calls"] == 8  # 4 blocks x (.contiguous() + .clone())
    assert sorted({tuple(site[1:]) for site in finding.evidence["sites"]}) == [
        (line_of(SAMPLES / "redundant_clones.py", ".contiguous()  #"), "contiguous"),
        (line_of(SAMPLES / "redundant_clones.py", "hidden.clone()"), "clone")]
    assert all(site[0] == path for site in finding.evidence["sites"])
    # what the clones cost, read from the trace; their share of the step is as reliable as the machine was quiet
    assert finding.evidence["clone_us_per_step"] > 0 and finding.evidence["clone_share_of_step"] is not None


@pytest.mark.slow
def test_needed_copies_and_autocast_casts_are_not_redundant(tmp_path, sample_audit):
    path = write_model(tmp_path, """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(32, 32)
            def forward(self, x):
                kept = x.clone()                     # an input: the clone protects the caller's tensor
                h = self.fc(x)
                h2 = h.clone()
                h2.mul_(2)                           # modified in place: the clone is needed
                t = h.transpose(0, 1).contiguous()   # after a view: needed for some shapes
                return kept.sum() + h2 + t.t() + self.fc(x).float()   # .float(): converts under autocast
        def get_model(): return Net().eval()
        def get_inputs(): return torch.randn(32, 32)
    """)
    assert "redundant-copy" not in slugs(audit(path, tmp_path))
    assert "redundant-copy" not in slugs(sample_audit("non_contiguous"))  # .contiguous() after permute


# --- tensor-creation-in-step ------------------------------------------------------------------

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


# --- moe-imbalance ----------------------------------------------------------------------------

@pytest.mark.slow
def test_skewed_router_measured_on_loader_batches(sample_audit):
    finding = only_finding(sample_audit("moe_skewed"), "moe-imbalance")
    assert finding.evidence["measured_on"] == "dataloader" and finding.evidence["forwards"] == BATCHES_AHEAD
    assert sum(finding.evidence["tokens_per_expert"]) == 128 * BATCHES_AHEAD  # every token of the step's batches, top-1
    assert finding.evidence["busiest"] == 0 and finding.evidence["max_over_mean"] > 3
    assert 7 in finding.evidence["idle_experts"]
    assert f"{BATCHES_AHEAD} real batches" in finding.message
    assert finding.locations[0].line == line_of(SAMPLES / "moe_skewed.py", "= expert(x[rows])")  # the dispatch


@pytest.mark.slow
def test_balanced_experts_and_layer_stacks_are_not_imbalanced(sample_audit):
    balanced = sample_audit("moe_layer")
    [group] = balanced.evidence.routing  # routed, measured on get_inputs()
    assert group.source == "synthetic" and sum(group.tokens) == 2 * 4 * 64  # top-2
    assert "moe-imbalance" not in slugs(balanced)
    assert sample_audit("gpt_block").evidence.routing == []  # a ModuleList of blocks sees equal tokens


@pytest.mark.slow
def test_skipped_layers_and_chosen_heads_are_not_routing(tmp_path):
    from advisor.capture.routing import measure_routing

    path = write_model(tmp_path, """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
                self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 2)})
            def forward(self, x):
                for layer in self.layers[:2]:  # layer drop: the others are skipped whole
                    x = layer(x)
                return self.heads["a"](x)  # one head chosen per task
        def get_model(): return Net()
        def get_inputs(): return torch.randn(16, 8)
    """)
    assert measure_routing(load_target(str(path))) == []


@pytest.mark.slow
def test_a_router_that_collapsed_onto_one_expert_is_reported_with_its_idle_experts(sample_audit):
    result = sample_audit("moe_collapsed")
    [group] = result.evidence.routing
    assert group.router == "gate" and group.tokens == [256, 0, 0, 0, 0, 0, 0, 0]
    finding = only_finding(result, "moe-imbalance")
    assert finding.evidence["idle_experts"] == [1, 2, 3, 4, 5, 6, 7] and finding.evidence["router"] == "gate"
    assert "routed by gate" in finding.message and "7 expert(s) get none" in finding.message


@pytest.mark.slow
def test_a_classifier_as_wide_as_a_layer_stack_is_no_router(tmp_path):
    from advisor.capture.routing import measure_routing

    path = write_model(tmp_path, """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
                self.classifier = nn.Linear(8, 4)  # 4 classes, as many as layers
            def forward(self, x):
                for layer in self.layers[:2]:  # layer drop: the others are skipped whole
                    x = layer(x)
                return self.classifier(x).softmax(dim=-1)  # a decision, but after the layers ran
        class Heads(nn.Module):
            def __init__(self):
                super().__init__()
                self.select = nn.Linear(8, 2)
                self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 2)})
            def forward(self, x):
                return self.heads["a"](x) + self.select(x)  # as wide as the heads, but decides nothing
        class Both(nn.Module):
            def __init__(self):
                super().__init__()
                self.net, self.h = Net(), Heads()
            def forward(self, x):
                return self.net(x), self.h(x)
        def get_model(): return Both()
        def get_inputs(): return torch.randn(16, 8)
    """)
    assert measure_routing(load_target(str(path))) == []


@pytest.mark.slow
def test_synthetic_routing_is_said_to_be_synthetic(sample_audit):
    evidence = sample_audit("moe_layer").evidence
    skewed = evidence.routing[0].model_copy(update={"tokens": [400, 30, 30, 30, 0, 0, 0, 22]})
    [finding] = check_rule("moe-imbalance", evidence.model_copy(update={"routing": [skewed]}))
    assert "synthetic" in finding.message and finding.evidence["idle_experts"] == [4, 5, 6]


# --- misaligned-dims --------------------------------------------------------------------------

@pytest.mark.slow
def test_misaligned_half_precision_matmuls_on_cudaonly_finding(sample_audit):
    result = sample_audit("misaligned_head")
    assert "misaligned-dims" not in slugs(result)  # CPU: not applicable
    [finding] = check_rule("misaligned-dims", as_cuda(result.evidence))
    assert sorted(map(tuple, finding.evidence["shapes"])) == [(250, 1001), (256, 250)]
    trace_only = as_cuda(result.evidence).model_copy(update={"graph": None})  # the trace's aten::addmm shapes
    [from_trace] = check_rule("misaligned-dims", trace_only)
    assert sorted(map(tuple, from_trace.evidence["shapes"])) == [(250, 1001), (256, 250)]
    aligned = sample_audit("bf16_weights")  # bf16, aligned dimensions
    assert check_rule("misaligned-dims", as_cuda(aligned.evidence)) == []


# --- graph-breaks -----------------------------------------------------------------------------

@pytest.mark.slow
def test_graph_breaks_are_reported_with_reasons_and_lines(sample_audit):
    finding = only_finding(sample_audit("host_sync"), "graph-breaks")
    path = SAMPLES / "host_sync.py"
    assert finding.evidence["places"] == 2 and finding.evidence["graphs"] > 2
    assert [loc.line for loc in finding.locations] == [line_of(path, ".item() > 0.5"),
                                                       line_of(path, "scores.squeeze(-1) > 0.3")]
    assert any("item()" in reason for reason in finding.evidence["reasons"])
    for sample in ("gpt_block", "moe_layer"):  # one graph; Dynamo traces moe_layer's torch.where
        assert "graph-breaks" not in slugs(sample_audit(sample))


@pytest.mark.slow
def test_capture_records_devices_and_constant_arguments():
    capture = capture_graph(torch.nn.Linear(4, 4), torch.randn(2, 4))
    [linear] = [n for n in capture.nodes if n.target == "F.linear"]
    assert linear.device == "cpu" and linear.shape == [2, 4]
    softmax = capture_graph(torch.nn.Softmax(dim=-1), torch.randn(2, 4))
    assert [n.constants for n in softmax.calls()] == [["-1", "_stacklevel=5"]]
