import torch
from torch.nn.parallel import DistributedDataParallel


def train(build_model, batches, steps, accumulate):
    model = DistributedDataParallel(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(steps):
        for micro in range(accumulate):
            x, y = next(batches)
            loss = torch.nn.functional.mse_loss(model(x), y) / accumulate  # FINDING
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
