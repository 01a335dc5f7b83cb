import torch


@torch.no_grad()
def sgd_step(params, lr):
    pairs = [(p, p.grad) for p in params]
    targets = [target for target, _ in pairs]
    torch._foreach_add_(targets, [source for _, source in pairs], alpha=-lr)
    return params
