"""A classifier wrapped in nn.DataParallel (dataparallel), inference.

On several GPUs DataParallel replicates the model and gathers outputs on GPU 0 every step from
one process; DistributedDataParallel (one process per GPU) is the recommended replacement.
"""

import torch
from torch import nn


def get_model():
    torch.manual_seed(0)
    return nn.DataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(32, 64)
# expect anywhere: dataparallel
