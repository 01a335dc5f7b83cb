"""A decoder that keeps every batch's prediction on the module, for a running statistic it reports later.

Each kept prediction still holds its autograd graph (the hidden activations its backward needed), so the
memory the step holds grows by about a batch's activations every step: the leak the memory-growth rule
finds, at the line that keeps them. Keeping ``y.detach()`` (or a plain number) holds a few bytes instead.
"""

import torch
from torch import nn


class TrackedDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1024))
        self.seen = []  # every batch's prediction, for the running statistic

    def forward(self, x):
        y = self.net(x)  # expect: memory-growth (made here, kept below)
        self.seen.append(y)
        return y


def get_model():
    torch.manual_seed(0)
    return TrackedDecoder()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(64, 32)


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)


def loss_fn(output, x):
    return output.pow(2).mean()
