"""Attention written out by hand instead of F.scaled_dot_product_attention.

What it detects:
    In the captured graph (so only code that actually runs): a matmul of queries and keys,
    optionally scaled and masked, into ``softmax``, optionally dropout, into a matmul with
    the values, where the attention weights are used for nothing else. Causal masks built in
    the forward from ``tril`` / ``triu`` are recognised and mapped to ``is_causal=True`` (a
    mask held in a buffer is passed as ``attn_mask``; it is ``is_causal=True`` when it is the
    usual lower-triangular one).

Why it matters:
    The hand-written form materializes the full (batch, heads, T, T) score matrix several
    times per layer — scores, scaled, masked, softmax, dropout — and reads it back each time:
    memory traffic and activation memory quadratic in the sequence length.
    ``F.scaled_dot_product_attention`` dispatches to FlashAttention / memory-efficient
    kernels (on CUDA and CPU) that never store the matrix.

How to fix:
    Replace the block with ``F.scaled_dot_product_attention(q, k, v, attn_mask=...,
    dropout_p=p if self.training else 0.0, is_causal=...)``. Its default scale is
    ``1/sqrt(head_dim)``; pass ``scale=`` for any other. A boolean ``attn_mask`` marks the
    positions to *keep* (the opposite of ``masked_fill``'s mask).

Example:
    Before::

        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = att @ v

    After::

        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
"""

from __future__ import annotations

import os
from typing import Iterator

from advisor.evidence import Evidence, GraphNode
from advisor.patterns import MASKS, find_attention
from advisor.rule import Finding, Fix, Layer, Location, Severity, Thresholds, rule

CAUSAL_BUILDERS = {"tril", "triu", "torch.tril", "torch.triu"}


@rule(slug="manual-attention", code="ADV116", layer=Layer.MODEL, severity=Severity.MEDIUM)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.graph is None:
        return
    graph = ev.graph
    nodes = {n.id: n for n in graph.nodes}
    digraph = graph.digraph
    matches = find_attention(graph.calls(), name=lambda n: n.target,
                             inputs=lambda n: [nodes[a] for a in n.args if a in nodes],
                             users=lambda n: [nodes[s] for s in digraph.successors(n.id)])
    if not matches:
        return
    causal = any(_causal_mask(m.between, nodes) for m in matches)
    lines = {(n.file, n.line) for m in matches for n in (m.scores, m.softmax, m.output, *m.between, *m.after)}
    cost_us = None
    if ev.trace is not None and ev.trace.source_annotated:
        cost_us = ev.trace.median_per_step(c for c in ev.trace.calls if (c.file, c.line) in lines)
    share = ev.share_of_step(cost_us) if cost_us is not None else None
    first = matches[0]
    shape = first.softmax.shape
    yield Finding(
        message=(f"{len(matches)} attention block(s) written by hand (matmul, softmax, matmul), first at "
                 f"{os.path.basename(first.softmax.file)}:{first.softmax.line}"
                 + (f" on a {shape} score matrix" if shape else "")
                 + ": F.scaled_dot_product_attention never materializes the scores"),
        impact=None,  # the lines also hold the projections; verification measures the gain
        evidence={"blocks": len(matches), "causal_mask": causal, "score_shape": shape,
                  "lines_share_of_step": round(share, 4) if share is not None else None},
        locations=[Location.at(m.softmax.file, m.softmax.line, function=m.softmax.module_path,
                               count_per_step=sum(1 for o in matches if (o.softmax.file, o.softmax.line) == site),
                               note=f"scores at line {m.scores.line}, output at line {m.output.line}")
                   for site, m in {(m.softmax.file, m.softmax.line): m for m in matches}.items() if site[0]][:6],
        fix=Fix(summary="replace the block with F.scaled_dot_product_attention(q, k, v"
                        + (", is_causal=True" if causal else ", attn_mask=keep_mask (or is_causal=True for a "
                                                             "lower-triangular mask)")
                        + ", dropout_p=p if self.training else 0.0); pass scale= if it is not 1/sqrt(head_dim)",
                before="att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))\n"
                       "att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float(\"-inf\"))\n"
                       "y = F.softmax(att, dim=-1) @ v",
                after="y = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
                docs=["https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html",
                      "https://pytorch.org/tutorials/intermediate/scaled_dot_product_attention_tutorial.html"]),
    )


def _causal_mask(between: list[GraphNode], nodes: dict[str, GraphNode]) -> bool:
    """Whether a mask operand descends from tril/triu (a causal mask), within a few ops."""
    for node in between:
        if node.target not in MASKS:
            continue
        frontier = [nodes[a] for a in node.args[1:] if a in nodes]
        for _ in range(4):
            if any(n.target in CAUSAL_BUILDERS for n in frontier):
                return True
            frontier = [nodes[a] for n in frontier for a in n.args if a in nodes]
    return False


@check.fix(tolerance=1e-4, what="F.scaled_dot_product_attention")
def fix(target, finding):
    """A graph rewrite putting SDPA in place of each matched block, with the same scale and mask.

    Fused attention sums in another order (online softmax): equal to about 1e-6 relative in
    float32; 1e-4 allows for long rows.
    """
    import dataclasses

    from advisor.verify.rewrites import use_sdpa

    return dataclasses.replace(target, compile_backend=use_sdpa)
