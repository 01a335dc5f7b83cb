"""A GRU cell written as a Python loop over 64 time steps, trained (kernel-storm).

Each time step runs a dozen small ops (two matmuls, gates, sigmoid, tanh, blends) on an
(8, 64) state: about 900 operators per step, a few microseconds of work each, so dispatch
overhead sets the pace. ``nn.GRU`` runs the same recurrence in one fused op per layer;
``torch.compile`` fuses the gates.
"""

import torch
from torch import nn


class LoopGRU(nn.Module):
    def __init__(self, inputs: int = 32, hidden: int = 64):
        super().__init__()
        self.input_gates = nn.Linear(inputs, 3 * hidden)
        self.hidden_gates = nn.Linear(hidden, 3 * hidden)
        self.head = nn.Linear(hidden, 10)
        self.hidden = hidden

    def forward(self, x):  # x: (batch, time, inputs)
        h = x.new_zeros(x.shape[0], self.hidden)
        projected = self.input_gates(x)
        for t in range(x.shape[1]):
            r_i, z_i, n_i = projected[:, t].chunk(3, dim=-1)
            r_h, z_h, n_h = self.hidden_gates(h).chunk(3, dim=-1)
            r = torch.sigmoid(r_i + r_h)
            z = torch.sigmoid(z_i + z_h)
            n = torch.tanh(n_i + r * n_h)
            h = (1 - z) * n + z * h  # BLEND LINE: four ops per time step, the most of any line; expect: kernel-storm
        return self.head(h)


def get_model():
    torch.manual_seed(0)
    return LoopGRU()


def get_inputs():
    return torch.randn(8, 64, 32, generator=torch.Generator().manual_seed(1))


def get_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)
