"""Trains a hand-written activation chain with gradient accumulation, in eager mode.

Each layer spells out a GELU approximation and a gated residual in small elementwise ops, so a
step is hundreds of tiny operators (kernel-storm: torch.compile fuses them). The optimizer
steps once every --accumulate micro-batches: advisor run's step is the optimizer step.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class HandGelu(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.gate = nn.Parameter(torch.full((width,), 0.5))

    def forward(self, x):
        y = x * torch.sigmoid(1.702 * x)  # QUICK GELU LINE
        return x + self.gate * (y - x) * 0.5 + 0.01 * torch.tanh(y)


class Chain(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(HandGelu(width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    model = Chain(args.width, depth=12)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    inputs = torch.randn(args.accumulate, 16, args.width)
    targets = torch.randn(args.accumulate, 16, args.width)
    for _ in range(args.steps):
        for micro in range(args.accumulate):
            loss = F.mse_loss(model(inputs[micro]), targets[micro]) / args.accumulate
            loss.backward()  # BACKWARD LINE
        optimizer.step()
        optimizer.zero_grad()
    print("done")


if __name__ == "__main__":
    main()
