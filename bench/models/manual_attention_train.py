"""samples/manual_attention.py as a training step with dropout active: the held-out report's GPT
causal case (a registered tril buffer), for bench/verify_accuracy.py."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples"))

import manual_attention  # noqa: E402

get_inputs = manual_attention.get_inputs


def get_model():
    return manual_attention.get_model().train()


def get_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=3e-4)
