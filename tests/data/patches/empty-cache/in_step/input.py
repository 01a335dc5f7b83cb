import torch


def step(model, x):
    out = model(x)
    # free what the forward left
    torch.cuda.empty_cache()  # FINDING
    return out
