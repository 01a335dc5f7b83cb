"""A top-2 mixture-of-experts feed-forward layer (real-world style), inference.

Routed the way many open MoE implementations do it: softmax router, top-k, then a Python
loop over experts gathering each expert's tokens with torch.where on the routing mask. The
gather sizes depend on the data, so each expert costs a host sync.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Expert(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(width, hidden, bias=False)
        self.w2 = nn.Linear(hidden, width, bias=False)
        self.w3 = nn.Linear(width, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoE(nn.Module):
    def __init__(self, width: int = 128, hidden: int = 256, experts: int = 8, top_k: int = 2):
        super().__init__()
        self.router = nn.Linear(width, experts, bias=False)
        self.experts = nn.ModuleList(Expert(width, hidden) for _ in range(experts))
        self.top_k = top_k

    def forward(self, x):
        batch, seq, width = x.shape
        tokens = x.view(-1, width)
        weights = F.softmax(self.router(tokens), dim=-1, dtype=torch.float)
        weights, selected = torch.topk(weights, self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(tokens)
        mask = F.one_hot(selected, num_classes=len(self.experts)).permute(2, 1, 0)
        for index, expert in enumerate(self.experts):
            slot, token = torch.where(mask[index])  # data-dependent size: a host sync per expert; expect: host-sync
            if token.numel() == 0:
                continue
            routed = expert(tokens[token]) * weights[token, slot, None]
            out.index_add_(0, token, routed)
        return out.view(batch, seq, width)


def get_model():
    torch.manual_seed(0)
    return SparseMoE().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(4, 64, 128)
