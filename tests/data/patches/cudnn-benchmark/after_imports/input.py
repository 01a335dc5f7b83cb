"""A conv net."""
from __future__ import annotations

import torch
from torch import nn

MODEL = nn.Conv2d(3, 8, 3)
