"""A healthy training step with a cheap in-memory data loader.

The batches are slices of tensors already in memory: loading costs next to nothing, so no
loader rule should fire. Exercises the training-step path (forward, loss, backward, step).
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4))


def _dataset():
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(512, 64, generator=generator), torch.randint(0, 4, (512,), generator=generator))


def get_dataloader():
    return DataLoader(_dataset(), batch_size=64, shuffle=True)


def get_inputs():
    features, labels = next(iter(get_dataloader()))
    return (features,)


def get_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def loss_fn(output, batch):
    return output.logsumexp(dim=-1).mean()
# expect nothing
