import torch.nn.functional as F
from torch import nn


def train(model: nn.Module, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        # the forward
        logits = model(x)  # FINDING
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
