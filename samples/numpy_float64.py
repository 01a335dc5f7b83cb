"""A regression MLP fed NumPy's arrays as they come: float64, NumPy's default dtype. ``torch.from_numpy`` keeps
it, and the model was cast with ``.double()`` to match (the usual answer to "expected scalar type Double but found
Float"): every matmul of the step runs in float64, at about half float32's rate on a CPU and a small fraction of
it on most GPUs (slow-precision, at the lines that brought float64 in). ``.float()`` at the same two places gives
the same fit in float32.
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def get_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))
    return model.double()  # expect: slow-precision


def get_inputs():
    features = np.random.default_rng(1).standard_normal((512, 64))
    return torch.from_numpy(features)  # expect: slow-precision


def get_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)


def loss_fn(prediction, features):
    return F.mse_loss(prediction, features[:, :4].sum(dim=1, keepdim=True))
