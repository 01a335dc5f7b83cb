"""An MLP served on the CPU with four intra-op threads per usable core (cpu-threads).

A common mistake in containers: the thread count is taken from the host, not from the cores
the container may use. Here it is set explicitly to 4x the usable cores.
"""

import os

import torch
from torch import nn

torch.set_num_threads(4 * len(os.sched_getaffinity(0)))


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(64, 512)
# expect anywhere: cpu-threads, missing-amp
