"""A tabular model with one tiny head per feature, run in a Python loop (kernel-storm).

Sixty-four features, each through its own 1->8->1 MLP and a gate: hundreds of operators per
step, each on a few hundred numbers.
"""

import torch
from torch import nn


class FeatureHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(1, 8)
        self.score = nn.Linear(8, 1)

    def forward(self, column):
        hidden = torch.nn.functional.silu(self.embed(column))
        return torch.sigmoid(self.score(hidden)) * column


class PerFeatureModel(nn.Module):
    def __init__(self, features: int = 64):
        super().__init__()
        self.heads = nn.ModuleList(FeatureHead() for _ in range(features))

    def forward(self, x):
        outputs = [head(x[:, i:i + 1]) for i, head in enumerate(self.heads)]  # one small op chain per feature; expect: kernel-storm
        return torch.cat(outputs, dim=1).sum(dim=1)


def get_model():
    torch.manual_seed(0)
    return PerFeatureModel().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(32, 64)
