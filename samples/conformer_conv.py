"""A Conformer-style convolution module stack that transposes around every Conv1d (non-contiguous).

Activations live as (batch, time, channels) for the linear layers but Conv1d wants
(batch, channels, time): each block copies the whole activation into the other layout twice.
"""

import torch
from torch import nn


class ConvModule(nn.Module):
    def __init__(self, channels: int = 64):
        super().__init__()
        self.pointwise = nn.Linear(channels, channels)
        self.depthwise = nn.Conv1d(channels, channels, 7, padding=3, groups=channels)
        self.out = nn.Linear(channels, channels)

    def forward(self, x):  # x: (batch, time, channels)
        y = torch.relu(self.pointwise(x))
        y = y.transpose(1, 2).contiguous()  # (B, T, C) -> (B, C, T) copy for Conv1d; expect: non-contiguous
        y = self.depthwise(y)
        y = y.transpose(1, 2).contiguous()  # and back: another copy; expect: non-contiguous
        return x + self.out(y)


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(*(ConvModule() for _ in range(4))).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(8, 1024, 64)
# expect anywhere: missing-amp
