"""A transformer-style MLP stack in fp32 whose step is almost all matmul (missing-amp).

On a GPU with tensor cores (or a CPU with native bf16) autocast to bf16/fp16 runs these
matmuls several times faster.
"""

import torch
from torch import nn


class FeedForward(nn.Module):
    def __init__(self, width: int = 512):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))  # expect: missing-amp


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(*(FeedForward() for _ in range(3))).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(128, 512)
