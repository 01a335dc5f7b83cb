import torch


@torch.no_grad()
def sgd_step(params, lr):
    for p in params:  # FINDING
        p.add_(p.grad, alpha=-lr)
        p.clamp_(-1, 1)
