"""A forward pass that calls torch.cuda.empty_cache() after every layer "to save memory"
(empty-cache), inference.

On a CPU run the call does nothing; on a GPU each one synchronizes and frees the allocator's
cache, so the next step allocates everything again with cudaMalloc.
"""

import torch
from torch import nn


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(128, 128) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
            torch.cuda.empty_cache()  # frees the cache the next layer needs again; expect: empty-cache
        return x


def get_model():
    torch.manual_seed(0)
    return Tower().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(16, 128)
