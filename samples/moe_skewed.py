"""A top-1 mixture of experts whose router collapsed onto a few experts (moe-imbalance), inference.

The router's weights favour expert 0 (as after training without a load-balancing loss), and
expert 7 receives no token. Tokens come from the data loader's batches, so the routing is
measured on real data.
"""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Expert(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return F.gelu(self.fc(x))


class TopOneMoE(nn.Module):
    def __init__(self, width: int = 64, experts: int = 8):
        super().__init__()
        self.router = nn.Linear(width, experts)
        self.experts = nn.ModuleList(Expert(width) for _ in range(experts))
        with torch.no_grad():
            self.router.bias.copy_(torch.tensor([2.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.0, -30.0]))

    def forward(self, x):
        choice = self.router(x).argmax(dim=-1)
        out = torch.zeros_like(x)
        for index, expert in enumerate(self.experts):
            rows = (choice == index).nonzero(as_tuple=True)[0]  # expect: host-sync
            out[rows] = expert(x[rows])
        return out


def _tokens():
    return torch.randn(1024, 64, generator=torch.Generator().manual_seed(0))


def get_dataloader():
    return DataLoader(TensorDataset(_tokens()), batch_size=128)


def get_model():
    torch.manual_seed(0)
    return TopOneMoE().eval()


def get_inputs():
    return (_tokens()[:128],)
# expect anywhere: moe-imbalance
