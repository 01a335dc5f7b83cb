"""A residual MLP stack that defensively clones and re-contiguous-es values that nobody modifies
(redundant-copy), inference.

Each block copies its hidden activations with .clone() "to be safe" and calls .contiguous() on
a linear layer's output, which is contiguous already.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int = 256):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        hidden = self.up(x).contiguous()  # linear outputs are contiguous already
        saved = hidden.clone()  # never modified in place: a copy for nothing
        return x + self.down(F.gelu(saved))


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(4)]).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(8, 64, 256)
# expect anywhere: redundant-copy, missing-amp
