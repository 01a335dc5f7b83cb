"""A chain of small ops, compiled already: on a GPU still launch-bound."""
import torch


def get_model():
    return torch.compile(Chain(depth=24))  # the model
