"""A BERT-style encoder whose attention is written with einsum and an additive padding mask
(manual-attention), inference.

The query is scaled before the product, scores come from ``einsum("bhqd,bhkd->bhqk")``, the
padding mask is added as a float ``(1 - mask) * finfo.min`` tensor, then softmax, dropout and
``einsum("bhqk,bhkd->bhqd")``. ``F.scaled_dot_product_attention(q, k, v, attn_mask=...)``
computes the same without storing the (batch, heads, T, T) scores.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, width: int = 128, heads: int = 4, dropout: float = 0.1):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.heads, self.dropout = heads, dropout

    def forward(self, x, additive_mask):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        q = q / math.sqrt(C // self.heads)  # scaled before the product
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) + additive_mask
        weights = F.dropout(scores.softmax(dim=-1), p=self.dropout, training=self.training)  # SOFTMAX LINE; expect: manual-attention
        y = torch.einsum("bhqk,bhkd->bhqd", weights, v)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


class Encoder(nn.Module):
    def __init__(self, width: int = 128, layers: int = 2):
        super().__init__()
        self.attention = nn.ModuleList(SelfAttention(width) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers))

    def forward(self, x, attention_mask):
        additive = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for attention, norm in zip(self.attention, self.norms):
            x = norm(x + attention(x, additive))
        return x


def get_model():
    torch.manual_seed(0)
    return Encoder().eval()


def get_inputs():
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(160, 257, (4,), generator=generator)
    attention_mask = (torch.arange(256)[None, :] < lengths[:, None]).long()  # right padding
    return torch.randn(4, 256, 128, generator=generator), attention_mask
# expect anywhere: missing-amp
