from torch import nn


def get_model():
    return nn.Sequential(nn.Linear(1024, 1024), nn.ReLU())
