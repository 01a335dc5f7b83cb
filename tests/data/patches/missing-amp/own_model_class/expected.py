import torch
from torch import nn


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU())

    def forward(self, x):
        """Two matmuls."""
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x = self.layers(x)  # most of the step
            return self.layers(x)


def get_model():
    return Stack().eval()
