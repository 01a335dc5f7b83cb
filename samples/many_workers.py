"""A training loader with more worker processes than usable cores (dataloader-too-many-workers)."""

import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))


def get_dataloader():
    data = TensorDataset(torch.randn(256, 32, generator=torch.Generator().manual_seed(0)), torch.zeros(256))
    return DataLoader(data, batch_size=32, num_workers=len(os.sched_getaffinity(0)) + 2)


def get_inputs():
    return torch.randn(32, 32, generator=torch.Generator().manual_seed(1))


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)
# expect anywhere: dataloader-too-many-workers, dataloader-workers
