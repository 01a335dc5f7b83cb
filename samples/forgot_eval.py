"""A classifier served for inference without model.eval(): Dropout and BatchNorm still in
training mode (train-mode-inference)."""

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.2))
        self.head = nn.Linear(128, 5)

    def forward(self, x):
        return self.head(self.body(x))


def get_model():
    torch.manual_seed(0)
    return Classifier()  # no .eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(32, 64)
# expect anywhere: train-mode-inference
