"""Not ready: the forward adds random noise (a leftover augmentation), so two calls on the same inputs
differ (determinism fails at the line that draws the noise)."""

import torch
from torch import nn


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 8)

    def forward(self, x):
        x = x + 0.01 * torch.randn_like(x)  # NOISE LINE
        return self.proj(x)


def get_model():
    torch.manual_seed(0)
    return Noisy().eval()


def get_inputs():
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
