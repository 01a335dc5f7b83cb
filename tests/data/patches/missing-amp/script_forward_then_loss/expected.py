import torch.nn.functional as F
from torch import nn
import torch


def train(model: nn.Module, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        # the forward
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)  # FINDING
            loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
