"""Multi-head attention written the way fairseq's MultiheadAttention writes it, in a bf16 model: time-first
inputs (T, B, C), heads folded into the batch (B * H, T, D), ``torch.bmm`` for the scores, the padding mask
applied with ``masked_fill`` on a (B, H, T, S) view, the softmax computed in float and cast back with
``type_as``, dropout, and ``torch.bmm`` with the values (manual-attention). The time-first layout makes ``bmm``
copy its transposed operands (non-contiguous), and fairseq's ``.contiguous()`` on a projection's output copies
nothing (redundant-copy, INFO).
"""

import torch
import torch.nn.functional as F
from torch import nn


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.1):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = dropout
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key_padding_mask):
        tgt_len, bsz, embed_dim = query.size()
        q = self.q_proj(query) * self.scaling
        k = self.k_proj(query)
        v = self.v_proj(query)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)  # expect: redundant-copy
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))  # time-first operands: bmm copies them; expect: non-contiguous
        attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
        attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))
        attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights_float = F.softmax(attn_weights.float(), dim=-1)  # expect: manual-attention
        attn_weights = attn_weights_float.type_as(attn_weights)
        attn_probs = F.dropout(attn_weights, p=self.dropout, training=self.training)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class Encoder(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4, layers: int = 2):
        super().__init__()
        self.attentions = nn.ModuleList(MultiheadAttention(dim, heads) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))

    def forward(self, x, padding):
        for attention, norm in zip(self.attentions, self.norms):
            x = norm(x + attention(x, padding))
        return x


def get_model():
    torch.manual_seed(0)
    return Encoder().to(torch.bfloat16).eval()


def get_inputs():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(128, 8, 256, generator=generator).to(torch.bfloat16)  # time-first
    padding = torch.zeros(8, 128, dtype=torch.bool)
    padding[:, 100:] = True  # the last 28 positions of every sequence are padding
    return x, padding
