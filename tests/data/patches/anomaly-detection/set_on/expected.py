import torch


def get_model():
    return torch.nn.Linear(4, 4)
