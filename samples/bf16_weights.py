"""A matmul-heavy model stored and run in bfloat16 (negative for missing-amp).

Same shape of work as missing_amp.py, but the parameters and inputs are already bf16.
"""

import torch
from torch import nn


def get_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512))
    return model.to(torch.bfloat16).eval()  # expect where bf16 is emulated: slow-precision


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(128, 512, dtype=torch.bfloat16)
# expect nothing
