"""A mixture of experts whose dispatch loop is kept out of torch.compile, and experts that copy.

The router loop (``nonzero()`` and ``if rows.numel():`` per expert) once failed to compile, so
its author wrapped the forward in ``torch.compiler.disable``: TorchDynamo captures no graph of
the whole model. advisor then captures each expert on its own, so the graph rules still see
the defensive ``.clone()`` every expert makes of its hidden activations (redundant-copy).
"""

import torch
import torch.nn.functional as F
from torch import nn


class Expert(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        hidden = F.gelu(self.up(x))
        kept = hidden.clone()  # never modified in place: a copy for nothing; expect: redundant-copy
        return self.down(kept)


class EagerDispatchMoE(nn.Module):
    def __init__(self, width: int = 128, experts: int = 4):
        super().__init__()
        self.router = nn.Linear(width, experts)
        self.experts = nn.ModuleList(Expert(width) for _ in range(experts))

    @torch.compiler.disable  # "compile broke on the routing loop"
    def forward(self, x):
        weights = self.router(x).softmax(dim=-1)
        choice = weights.argmax(dim=-1)
        out = torch.zeros_like(x)
        for index, expert in enumerate(self.experts):
            rows = (choice == index).nonzero().squeeze(-1)  # expect: host-sync
            if rows.numel():
                out[rows] = weights[rows, index, None] * expert(x[rows])
        return out


def get_model():
    torch.manual_seed(0)
    return EagerDispatchMoE().eval()


def get_inputs():
    return torch.randn(512, 128, generator=torch.Generator().manual_seed(1))
# expect anywhere: missing-amp
