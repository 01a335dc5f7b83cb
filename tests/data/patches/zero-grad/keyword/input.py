import torch


def train(model, optimizer, batches):
    for x in batches:
        loss = model(x).sum()  # the loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # FINDING
