"""Attention written with einsum on [batch, seq, heads, dim] tensors (manual-attention), inference.

The projections are only viewed, never transposed: ``einsum("bqhd,bkhd->bhqk")`` makes the scores,
which are scaled, given an additive padding mask, and softmaxed; ``einsum("bhqk,bkhd->bqhd")`` puts the
values back in the input's layout. ``F.scaled_dot_product_attention`` computes the same on the tensors
transposed to [batch, heads, seq, dim] (the fix permutes them, and the result back).
"""

import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, width: int = 128, heads: int = 4):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.heads = heads

    def forward(self, x, additive_mask):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads) for t in self.qkv(x).split(C, dim=2))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * (C // self.heads) ** -0.5
        weights = (scores + additive_mask).softmax(-1)  # expect: manual-attention
        y = torch.einsum("bhqk,bkhd->bqhd", weights, v)
        return self.out(y.reshape(B, T, C))


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
