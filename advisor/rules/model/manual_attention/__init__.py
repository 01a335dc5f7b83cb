"""Attention written out by hand instead of F.scaled_dot_product_attention.

What it detects:
    In the captured graph (so only code that actually runs): a matmul of queries and keys
    (``q @ kᵀ``, ``torch.matmul``, ``bmm``, ``baddbmm`` or an ``einsum`` such as
    ``"bhqd,bhkd->bhqk"``, or ``"bqhd,bkhd->bhqk"`` on tensors laid out [batch, seq, heads, dim],
    which the fix permutes for SDPA and back), in any layout of the sequence (batch-first or
    time-first, heads apart or folded into the batch, the scores viewed as [batch, heads, q, k]
    to be masked and back), optionally scaled (multiplied or divided, by a number or a 0-d
    tensor, before or after the matmul), masked (``masked_fill``, ``torch.where(mask, scores,
    min_value)``, or an added float mask) and cast, into ``softmax``, optionally cast back
    (``.type(v.dtype)``, ``.type_as(scores)``), dropped out (``F.dropout`` or an ``nn.Dropout``
    module) and viewed back, into a matmul with the values, where the attention weights are used
    for nothing else (returned to the caller, they are left alone) — the fairseq form, BLOOM's
    (an ALiBi bias into ``baddbmm`` with the scale as ``alpha``, a causal ``masked_fill`` on a
    [batch, heads, q, k] view, a float32 softmax), the nanoGPT form and the "eager" attention
    functions of HF transformers alike. A mask built in the forward by ``tril`` / ``triu``, or
    read from a buffer whose values are a triangle, is a causal mask: ``is_causal=True``; a bias
    and a mask together become one float ``attn_mask``.

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

import re
from typing import Callable, Iterator

from advisor.evidence import Evidence, GraphNode
from advisor.opnames import CAUSAL_BUILDERS
from advisor.rulekit.fixing import compiled_with
from advisor.rulekit.patterns import BADDBMM, MASKS, find_attention, mask_operands
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Thresholds, rule
from advisor.rules.model.manual_attention.sdpa_rewrite import SdpaRewrite
from advisor.sources import site_label

TRIANGULAR_BUFFERS = {"lower-triangular", "upper-triangular"}  # GraphNode.value_kind of a causal mask buffer
CAUSAL_SEARCH_DEPTH = 4  # ops between a mask operand and the tril/triu that built it (== 0, slicing, view)


@rule(slug="manual-attention", code="ADV116", layer=Layer.MODEL, needs=("graph",), severity=Severity.MEDIUM)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.graph is None:
        yield Clean(why="no graph was captured")
        return
    graph = ev.graph
    nodes = {n.id: n for n in graph.nodes}
    digraph = graph.digraph
    inputs = lambda n: [nodes[a] for a in n.args if a in nodes]  # noqa: E731
    matches = find_attention(graph.calls(), name=lambda n: n.target, inputs=inputs,
                             users=lambda n: [nodes[s] for s in digraph.successors(n.id)],
                             equation=lambda n: n.constants[0].strip("'\"") if n.constants else "")
    if not matches:
        softmaxes = sum(1 for n in graph.calls() if n.target.rsplit(".", 1)[-1] in ("softmax", "_softmax"))
        yield Clean(why=f"no matmul of queries and keys feeds a softmax and a matmul with values in the graph "
                        f"({softmaxes} softmax call(s) in it)")
        return
    causal = any(_causal_mask(m.between, inputs) for m in matches)
    biased = any(m.scores.target in BADDBMM for m in matches)  # baddbmm(bias, q, k): ALiBi, relative positions
    lines = {(n.file, n.line) for m in matches for n in (m.scores, m.softmax, m.output, *m.between, *m.after)}
    cost_us = None
    if ev.trace is not None and ev.trace.source_annotated:
        cost_us = ev.trace.median_per_step(c for c in ev.trace.calls if (c.file, c.line) in lines)
    share = ev.share_of_step(cost_us) if cost_us is not None else None
    first = matches[0]
    shape = first.softmax.shape
    yield Finding(
        message=(f"{len(matches)} attention block(s) written by hand (matmul, softmax, matmul), first at "
                 f"{site_label(first.softmax.file, first.softmax.line)}"
                 + (f" on a {shape} score matrix" if shape else "")
                 + ": F.scaled_dot_product_attention never materializes the scores"),
        impact=None,  # the lines also hold the projections; verification measures the gain
        evidence={"blocks": len(matches), "causal_mask": causal, "score_bias": biased, "score_shape": shape,
                  "lines_share_of_step": round(share, 4) if share is not None else None},
        locations=[Location.at(m.softmax.file, m.softmax.line, function=m.softmax.module_path,
                               count_per_step=sum(1 for o in matches if (o.softmax.file, o.softmax.line) == site),
                               note=f"scores at line {m.scores.line}, output at line {m.output.line}")
                   for site, m in {(m.softmax.file, m.softmax.line): m for m in matches}.items() if site[0]][:6],
        fix=Fix(summary="replace the block with F.scaled_dot_product_attention(q, k, v"
                        + (", attn_mask=the scores' bias as a float mask, the masked positions set to -inf in it"
                           if biased else ", is_causal=True" if causal else
                           ", attn_mask=keep_mask (or is_causal=True for a lower-triangular mask)")
                        + ", dropout_p=p if self.training else 0.0); pass scale= if it is not 1/sqrt(head_dim)",
                docs=["https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html",
                      "https://pytorch.org/tutorials/intermediate/scaled_dot_product_attention_tutorial.html"]),
    )


def _causal_mask(between: list[GraphNode], inputs: Callable[[GraphNode], list[GraphNode]]) -> bool:
    """Whether a mask operand descends, within a few ops, from tril/triu or a triangular buffer."""
    for node in between:
        if node.target not in MASKS:
            continue
        frontier = mask_operands(node, lambda n: n.target, inputs)
        for _ in range(CAUSAL_SEARCH_DEPTH):
            if any(n.target in CAUSAL_BUILDERS or n.value_kind in TRIANGULAR_BUFFERS for n in frontier):
                return True
            frontier = [i for n in frontier for i in inputs(n)]
    return False


@check.fix(tolerance=1e-4, what="F.scaled_dot_product_attention")
def fix(target, finding):
    """A graph rewrite putting SDPA in place of each matched block, with the same scale and mask.

    Fused attention sums in another order (online softmax): equal to about 1e-6 relative in
    float32; 1e-4 allows for long rows.
    """
    return compiled_with(target, SdpaRewrite())


@check.patch(what="the hand-written block as one scaled_dot_product_attention call")
def patch(files, finding):
    """Each block the finding names (from its scores line to its output line), when it is the plain chain
    ``attention_edit`` reads; the dropout, the mask and the scale carried over."""
    from advisor.rules.model.manual_attention.sdpa_edit import sdpa_changes

    changes = []
    for place in finding.locations:
        scores, output = (int(n) for n in re.findall(r"line (\d+)", place.note)[:2])
        source = files.read(place.file)
        changes += sdpa_changes(source, scores, output)
    return source.with_torch(changes) if changes else changes

