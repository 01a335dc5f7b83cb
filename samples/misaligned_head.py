"""A bf16 language-model head over a vocabulary of 1001 tokens (misaligned-dims), inference.

1001 is not a multiple of 8: on a GPU, tensor cores run this GEMM padded or fall back. The
hidden size 250 is misaligned too. On a CPU the rule does not apply.
"""

import torch
from torch import nn


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 250), nn.GELU(), nn.Linear(250, 1001)).to(torch.bfloat16).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(128, 256, dtype=torch.bfloat16)
# expect nothing
# expect on cuda: misaligned-dims
