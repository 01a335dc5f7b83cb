import torch


def attend(q, k, v):
    scores = torch.matmul(q, k.transpose(-2, -1)) / 8.0
    weights = scores.softmax(dim=-1)  # FINDING
    return_value = torch.matmul(weights, v)
    return return_value
