import torch


@torch.no_grad()
def sgd_step(params, lr):
    for p in params:  # FINDING
        p -= lr * p.grad
    return params
