"""A VGG-style conv block stack whose convolutions keep a bias before BatchNorm (conv-bias-before-bn)."""

import torch
from torch import nn


def block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU())  # bias before BN


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(block(3, 16), block(16, 32), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(8, 3, 32, 32)
# expect anywhere: conv-bias-before-bn, channels-last
