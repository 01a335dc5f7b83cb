"""manual-attention (ADV116): Attention written out by hand instead of F.scaled_dot_product_attention. Its cases:
the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
import torch

from advisor.capture.graph import capture_graph
from advisor.rules.model.manual_attention.sdpa_rewrite import SdpaRewrite, use_sdpa
from conftest import SAMPLES, audit, check_rule, line_of, only_finding, slugs, verify_sample, write_model
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("manual-attention")


def _graph_evidence(model, inputs):
    from advisor.evidence import Evidence, TargetInfo

    capture = capture_graph(model, inputs)
    torch._dynamo.reset()
    return Evidence(target=TargetInfo(model_file="bloom.py"), graph=capture)


def _bloom_inputs():
    q, k, v = (torch.randn(6, 16, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    alibi = torch.randn(6, 1, 16, generator=torch.Generator().manual_seed(4))
    return q, k, v, alibi, torch.ones(16, 16, dtype=torch.bool).triu(1)[None, None]


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
