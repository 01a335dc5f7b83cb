"""A training step that still runs torch.autograd.gradcheck on a custom activation (debug-apis).

The check was added while writing the activation's backward and never removed: every step it
evaluates the function many times in float64 with finite differences.
"""

import torch
from torch import nn


class SquarePlus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        root = torch.sqrt(x * x + 4)
        ctx.save_for_backward(x, root)
        return (x + root) / 2

    @staticmethod
    def backward(ctx, grad):
        x, root = ctx.saved_tensors
        return grad * (1 + x / root) / 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 8)
        self.probe = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)

    def forward(self, x):
        torch.autograd.gradcheck(SquarePlus.apply, (self.probe,))  # debugging left in the step; expect: debug-apis, host-sync, kernel-storm
        return self.fc2(SquarePlus.apply(self.fc1(x)))


def get_model():
    torch.manual_seed(0)
    return Net()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(32, 64)


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)
