"""A GPT-2 style causal self-attention written out by hand (manual-attention), inference.

The original nanoGPT / GPT-2 form: scores = q @ kᵀ / sqrt(d), causal mask from a registered
buffer, softmax, dropout, @ v. The (batch, heads, T, T) score matrix is built and read back
several times per layer; F.scaled_dot_product_attention computes the same without storing it.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int = 128, heads: int = 4, block_size: int = 256):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dropout = nn.Dropout(0.1)
        self.heads = heads
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)  # expect: manual-attention
        att = self.dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(CausalSelfAttention(), CausalSelfAttention()).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(4, 256, 128)
# expect anywhere: non-contiguous
