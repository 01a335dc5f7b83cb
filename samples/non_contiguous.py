"""A ConvNeXt-style stack that shuffles layouts every block (non-contiguous).

Each block permutes NCHW -> NHWC for a LayerNorm and back, and forces each permuted view
into a fresh contiguous copy: four full-tensor copies per block that do no arithmetic.
"""

import torch
from torch import nn


class ShuffleBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.mix = nn.Linear(channels, channels)

    def forward(self, x):
        y = self.dw(x)
        y = y.permute(0, 2, 3, 1).contiguous()  # NCHW -> NHWC copy; expect: non-contiguous
        y = self.mix(self.norm(y))
        y = y.permute(0, 3, 1, 2).contiguous()  # and back: another copy; expect: non-contiguous
        return x + y


class ShuffleNet(nn.Module):
    def __init__(self, channels: int = 32, depth: int = 4):
        super().__init__()
        self.blocks = nn.Sequential(*(ShuffleBlock(channels) for _ in range(depth)))

    def forward(self, x):
        return self.blocks(x)


def get_model():
    torch.manual_seed(0)
    return ShuffleNet().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(8, 32, 32, 32)
# expect anywhere: channels-last
