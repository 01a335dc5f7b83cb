"""A healthy inference model: a few wide layers under bf16 autocast, no syncs, no layout shuffles.

advisor should report nothing here; it is the negative control for every rule. (It runs its
matmuls in bf16, as a tuned model on a bf16-capable CPU or a modern GPU does.)
"""

import torch
from torch import nn


class TunedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(256, 512), nn.GELU(),
            nn.Linear(512, 512), nn.GELU(),
            nn.Linear(512, 10),
        )

    def forward(self, x):
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):  # expect where bf16 is emulated: slow-precision
            return self.layers(x).float()


def get_model():
    torch.manual_seed(0)
    return TunedMLP().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(64, 256)
# expect nothing
