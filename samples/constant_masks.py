"""A decoder layer that rebuilds its causal mask and position ids in every forward
(tensor-creation-in-step), inference.

The T x T float mask (T = 512) is allocated and filled twice per call, and arange builds the
position ids again: the same tensors every step. Registering them once as buffers removes the work.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Decoder(nn.Module):
    def __init__(self, width: int = 64, heads: int = 2, block_size: int = 512):
        super().__init__()
        self.pos = nn.Embedding(block_size, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        positions = torch.arange(T)  # rebuilt every step
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)  # rebuilt every step
        x = x + self.pos(positions)
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return y.transpose(1, 2).reshape(B, T, C)


def get_model():
    torch.manual_seed(0)
    return Decoder().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(1, 512, 64)
# expect anywhere: tensor-creation-in-step
