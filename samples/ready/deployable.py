"""A model ready to deploy: in eval mode, exportable, one graph, no recompiles from its own code,
deterministic, and close under bf16. ``advisor ready`` passes it (or skips a check and says why)."""

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Dropout(0.1), nn.LayerNorm(256))
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.body(x)).softmax(dim=-1)


def get_model():
    torch.manual_seed(0)
    return Classifier().eval()


def get_inputs():
    return torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
