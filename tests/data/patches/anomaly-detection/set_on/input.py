import torch

torch.autograd.set_detect_anomaly(True)


def get_model():
    return torch.nn.Linear(4, 4)
