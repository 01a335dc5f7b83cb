"""A gated MLP that reads values back to the host inside its forward (host-sync).

Each block checks a gate with `.item()` and picks active rows with a boolean mask: one
scalar read and one data-dependent size per block per step.
"""

import torch
from torch import nn


class GatedBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.gate = nn.Linear(width, 1)

    def forward(self, x):
        scores = torch.sigmoid(self.gate(x))
        if scores.mean().item() > 0.5:  # host sync: the branch needs the value on the host; expect: host-sync
            x = x * 1.5
        active = x[scores.squeeze(-1) > 0.3]  # host sync: boolean mask -> data-dependent size; expect: host-sync
        return x + self.proj(x).mean() + active.sum()


class GatedMLP(nn.Module):
    def __init__(self, width: int = 64, depth: int = 4):
        super().__init__()
        self.blocks = nn.ModuleList(GatedBlock(width) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def get_model():
    torch.manual_seed(0)
    return GatedMLP()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(32, 64)
# expect anywhere: graph-breaks
