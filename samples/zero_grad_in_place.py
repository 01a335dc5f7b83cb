"""A training script whose loop zeroes gradients in place (zero-grad).

The audit runs the step through the protocol functions; the loop below, under __main__, is
where the user trains, and its zero_grad(set_to_none=False) is read from the source.
"""

import torch
from torch import nn


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(64, 128)


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train(steps: int = 100):
    model, optimizer = get_model(), None
    optimizer = get_optimizer(model)
    for _ in range(steps):
        loss = model(get_inputs()).logsumexp(-1).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # writes zeros over every gradient each step; expect: zero-grad


if __name__ == "__main__":
    train()
