"""A hand-written activation chain: a dozen tiny elementwise ops per layer, in eager mode (kernel-storm).

Each of 12 layers applies a GELU approximation written out by hand (``x * sigmoid(1.702 x)``)
plus a gated residual: about 100 operators per step, each on a small tensor, so the per-op
dispatch cost, not the arithmetic, sets the pace. ``torch.compile`` fuses the chain.
"""

import torch
from torch import nn


class HandGelu(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.gate = nn.Parameter(torch.full((width,), 0.5))

    def forward(self, x):
        y = x * torch.sigmoid(1.702 * x)  # QUICK GELU LINE; expect: kernel-storm
        return x + self.gate * (y - x) * 0.5 + 0.01 * torch.tanh(y)


class Chain(nn.Module):
    def __init__(self, width: int = 256, depth: int = 12):
        super().__init__()
        self.layers = nn.ModuleList(HandGelu(width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def get_model():
    torch.manual_seed(0)
    return Chain().eval()


def get_inputs():
    return torch.randn(16, 256, generator=torch.Generator().manual_seed(1))
