"""Not ready: the forward branches on the batch size, so a compiled model guards on it and compiles
again when a batch crosses the bound (recompiles fails at the line; PyTorch's own recompilations for
the first size change and the size-1 case are explained, not failed)."""

import torch
from torch import nn


class Chunked(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x):
        if x.shape[0] > 16:  # SIZE BRANCH LINE
            return torch.cat([self.proj(part) for part in x.split(16)])
        return self.proj(x)


def get_model():
    torch.manual_seed(0)
    return Chunked().eval()


def get_inputs():
    return torch.randn(8, 32, generator=torch.Generator().manual_seed(1))
