"""A chain of small ops."""
import torch


def get_model():
    return Chain(depth=24)  # the model
