"""A top-1 mixture of experts whose router sends every token to one expert (moe-imbalance), inference.

The router's bias favours expert 0 so strongly (as after training without a load-balancing
loss) that argmax picks it for every token, and the dispatch loop skips experts with no rows
(``if rows.numel():``): seven of eight experts are never called. advisor recognises the router
(a Linear as wide as the expert list, feeding argmax), so the idle experts count as imbalance.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Expert(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class CollapsedMoE(nn.Module):
    def __init__(self, width: int = 64, experts: int = 8):
        super().__init__()
        self.gate = nn.Linear(width, experts)
        self.experts = nn.ModuleList(Expert(width) for _ in range(experts))
        with torch.no_grad():
            self.gate.bias.copy_(torch.tensor([40.0] + [0.0] * (experts - 1)))

    def forward(self, x):
        choice = self.gate(x).argmax(dim=-1)
        out = torch.zeros_like(x)
        for index, expert in enumerate(self.experts):
            rows = (choice == index).nonzero(as_tuple=True)[0]  # expect: host-sync
            if rows.numel():  # DISPATCH LINE
                out[rows] = expert(x[rows])  # expect: moe-imbalance
        return out


def get_model():
    torch.manual_seed(0)
    return CollapsedMoE().eval()


def get_inputs():
    return torch.randn(256, 64, generator=torch.Generator().manual_seed(1))
