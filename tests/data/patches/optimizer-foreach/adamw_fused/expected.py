import torch


def get_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
