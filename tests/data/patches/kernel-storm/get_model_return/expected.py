"""A chain of small ops."""
import torch


def get_model():
    return torch.compile(Chain(depth=24))  # the model
