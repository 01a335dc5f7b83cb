"""A conv net."""
from __future__ import annotations

import torch
from torch import nn
torch.backends.cudnn.benchmark = True

MODEL = nn.Conv2d(3, 8, 3)
