import torch


def wrap(model):
    return torch.nn.parallel.DistributedDataParallel(
        model, find_unused_parameters=False)  # FINDING
