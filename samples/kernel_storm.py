"""A hand-written recurrent cell stepped in a Python loop (kernel-storm).

Sixty-four time steps, each a chain of small elementwise ops on a 16x32 state: hundreds of
tiny operators per step, each too short to amortize its dispatch (or, on GPU, launch) cost.
"""

import torch
from torch import nn


class LoopCell(nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.inp = nn.Linear(width, 4 * width)
        self.rec = nn.Linear(width, 4 * width, bias=False)

    def forward(self, x):
        batch, steps, width = x.shape
        h = x.new_zeros(batch, width)
        c = x.new_zeros(batch, width)
        projected = self.inp(x)
        for t in range(steps):  # one tiny op chain per time step
            gates = projected[:, t] + self.rec(h)  # expect: kernel-storm
            i, f, g, o = gates.chunk(4, dim=-1)
            i, f, o = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o)
            c = f * c + i * torch.tanh(g)  # expect: kernel-storm
            h = o * torch.tanh(c)
        return h


def get_model():
    torch.manual_seed(0)
    return LoopCell().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(16, 64, 32)
