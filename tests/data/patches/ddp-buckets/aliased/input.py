from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model, rank):
    return DDP(model, device_ids=[rank])  # FINDING
