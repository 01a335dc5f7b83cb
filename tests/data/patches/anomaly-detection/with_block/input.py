import torch


def step(model, x):
    with torch.autograd.detect_anomaly():
        loss = model(x).sum()
        loss.backward()
    return loss
