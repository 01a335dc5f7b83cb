import torch
from torch import nn


def get_model():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    return model.to(memory_format=torch.channels_last)


def get_inputs():
    return torch.randn(8, 3, 32, 32).contiguous(memory_format=torch.channels_last)
