"""Not ready: the model is returned without ``.eval()``, so its Dropout drops activations and its
BatchNorm normalises with each batch's statistics when served (eval-mode fails at their lines;
determinism fails too: dropout draws new masks on every call)."""

import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 64)
        self.norm = nn.BatchNorm1d(64)  # BATCHNORM LINE
        self.drop = nn.Dropout(0.2)  # DROPOUT LINE
        self.out = nn.Linear(64, 4)

    def forward(self, x):
        return self.out(self.drop(torch.relu(self.norm(self.proj(x)))))


def get_model():
    torch.manual_seed(0)
    return Scorer()  # no .eval()


def get_inputs():
    return torch.randn(8, 32, generator=torch.Generator().manual_seed(1))
