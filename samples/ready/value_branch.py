"""Not ready: a Python branch on a tensor's value. torch.export cannot trace it (export fails at the
line) and torch.compile splits the forward there (compile warns with the graph break)."""

import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        y = self.proj(x)
        if y.mean() > 0:  # VALUE BRANCH LINE
            return torch.relu(y)
        return torch.tanh(y)


def get_model():
    torch.manual_seed(0)
    return Gate().eval()


def get_inputs():
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
