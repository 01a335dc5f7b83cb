import torch
import concurrent.futures
import copy
checkpoint_writer = concurrent.futures.ThreadPoolExecutor(max_workers=1)


def train(model, optimizer, batches):
    for step, x in enumerate(batches):
        model(x).sum().backward()
        optimizer.step()
        checkpoint_writer.submit(torch.save, copy.deepcopy({"model": model.state_dict(), "step": step}), "ckpt.pt")  # FINDING
