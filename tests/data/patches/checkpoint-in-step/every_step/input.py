import torch


def train(model, optimizer, batches):
    for step, x in enumerate(batches):
        model(x).sum().backward()
        optimizer.step()
        torch.save({"model": model.state_dict(), "step": step}, "ckpt.pt")  # FINDING
