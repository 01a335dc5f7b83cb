from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, loader, optimizer, accumulate):
    model = DDP(model)
    for i, (x, y) in enumerate(loader):
        model(x).sum().backward()  # FINDING
        if (i + 1) % accumulate == 0:
            optimizer.step()
