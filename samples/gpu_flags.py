"""A conv net whose start-up code sets the CUDA library flags for a reproducibility run and
never resets them: deterministic algorithms on, cuDNN autotuning off, TF32 off
(deterministic-algorithms, cudnn-benchmark, tf32-disabled).

These cost on a GPU only. Audited on a CPU, the rules say nothing; the settings are recorded in
the environment, where the tests read them.
"""

import torch
from torch import nn

torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.set_float32_matmul_precision("highest")


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(256, 10)).eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(8, 3, 32, 32)
# expect anywhere: channels-last
# expect on cuda: cudnn-benchmark, tf32-disabled, deterministic-algorithms
