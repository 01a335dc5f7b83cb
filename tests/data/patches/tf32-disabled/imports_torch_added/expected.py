from torch import nn
import torch
torch.set_float32_matmul_precision("high")


def get_model():
    return nn.Linear(1024, 1024)
