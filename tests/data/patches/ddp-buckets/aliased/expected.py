from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model, rank):
    return DDP(model, device_ids=[rank], gradient_as_bucket_view=True, bucket_cap_mb=100)  # FINDING
