"""A self-attention layer split into many narrow heads: 32 heads of 4 dimensions each over a 128-wide model.

Each head's scores are a (256 x 4) by (4 x 256) product: four multiply-adds per output, too few to keep the
machine's matrix units busy, so the attention runs far below what this machine's matmuls reach; the same
width in 2 heads of 64 does the same FLOPs at a high rate. advisor should report below-roof at the attention.
"""

import torch
from torch import nn
from torch.nn import functional as F

WIDTH, HEADS, SEQUENCE = 128, 32, 256


class NarrowHeadAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, HEADS, width // HEADS).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)  # expect: below-roof
        return self.out(y.transpose(1, 2).reshape(batch, length, width))


def get_model():
    torch.manual_seed(0)
    return NarrowHeadAttention().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(2, SEQUENCE, WIDTH)
