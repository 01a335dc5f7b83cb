import torch


def get_optimizer(model):
    if model.training:
        return torch.optim.RMSprop(model.parameters(), lr=1e-3)
    return torch.optim.RMSprop(model.parameters(), lr=1e-4)
