"""Training with autograd anomaly detection left on from a debugging session (anomaly-detection)."""

import torch
from torch import nn

torch.autograd.set_detect_anomaly(True)  # left over from hunting a NaN


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 1))


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(64, 32)


def get_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)
# expect anywhere: anomaly-detection
