"""A healthy inference model: a few wide layers, no host syncs, no layout shuffles.

advisor should report nothing here; it is the negative control for every rule.
"""

import torch
from torch import nn


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(256, 512), nn.GELU(),
        nn.Linear(512, 512), nn.GELU(),
        nn.Linear(512, 10),
    ).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(64, 256)
