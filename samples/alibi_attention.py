"""Attention written the way BLOOM writes it (manual-attention): heads folded into the batch (B * H, T, D), the
ALiBi position bias fed to ``baddbmm`` with the scale as its ``alpha`` and the queries and keys as keyword
arguments, the scores viewed as (B, H, T, T) to be masked with ``torch.masked_fill`` and a causal mask, a softmax
in float32 cast back, dropout, and the weights viewed back to (B * H, T, T) for ``bmm`` with the values.

``F.scaled_dot_product_attention`` takes the bias and the mask as one float ``attn_mask``. Small (64 tokens, 16
dimensions a head): its matmuls of a few MFLOP each leave reduced precision nothing to gain.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def build_alibi(heads: int, batch: int, length: int) -> torch.Tensor:
    """BLOOM's linear biases: a slope per head times the key's position, shaped (B * H, 1, T)."""
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)])
    positions = torch.arange(length, dtype=torch.float32)
    return (slopes[:, None] * positions[None, :]).repeat(batch, 1)[:, None, :]


class BloomAttention(nn.Module):
    def __init__(self, hidden: int = 128, heads: int = 8, dropout: float = 0.0):
        super().__init__()
        self.num_heads, self.head_dim = heads, hidden // heads
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.attention_dropout = nn.Dropout(dropout)
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.beta = 1.0

    def forward(self, hidden_states, alibi, attention_mask):
        batch, length, _ = hidden_states.shape
        heads, dim = self.num_heads, self.head_dim
        fused = self.query_key_value(hidden_states).view(batch, length, heads, 3, dim)
        query, key, value = fused[..., 0, :], fused[..., 1, :], fused[..., 2, :]
        query = query.transpose(1, 2).reshape(batch * heads, length, dim)
        key = key.permute(0, 2, 3, 1).reshape(batch * heads, dim, length)  # the permuted slice is copied; expect: non-contiguous
        value = value.transpose(1, 2).reshape(batch * heads, length, dim)
        scores = alibi.baddbmm(batch1=query, batch2=key, beta=self.beta, alpha=self.inv_norm_factor)
        scores = scores.view(batch, heads, length, length)
        weights = torch.masked_fill(scores, attention_mask, torch.finfo(scores.dtype).min)
        probs = F.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)  # expect: manual-attention
        probs = self.attention_dropout(probs)
        context = torch.bmm(probs.view(batch * heads, length, length), value)
        context = context.view(batch, heads, length, dim).permute(0, 2, 1, 3).reshape(batch, length, heads * dim)
        return self.dense(context)


class Bloom(nn.Module):
    def __init__(self, hidden: int = 128, heads: int = 8, layers: int = 2, batch: int = 2, length: int = 64):
        super().__init__()
        self.attentions = nn.ModuleList(BloomAttention(hidden, heads) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
        self.register_buffer("alibi", build_alibi(heads, batch, length), persistent=False)
        causal = torch.ones(length, length, dtype=torch.bool).triu(diagonal=1)[None, None]  # True: masked
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, hidden_states):
        for attention, norm in zip(self.attentions, self.norms):
            hidden_states = hidden_states + attention(norm(hidden_states), self.alibi, self.causal)
        return hidden_states


def get_model():
    torch.manual_seed(0)
    return Bloom().eval()


def get_inputs():
    return torch.randn(2, 64, 128, generator=torch.Generator().manual_seed(1))
