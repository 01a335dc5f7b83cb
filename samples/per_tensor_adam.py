"""A deep stack of small layers trained with Adam forced to its single-tensor loop
(optimizer-foreach).

foreach=False makes Adam launch about ten small ops per parameter tensor (here 48 tensors);
fused=True does the update in one kernel per tensor group.
"""

import torch
from torch import nn


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(24)])


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(16, 64)


def get_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
# expect anywhere: optimizer-foreach, kernel-storm
