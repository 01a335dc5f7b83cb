from torch import nn


def get_model():
    return nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1))
