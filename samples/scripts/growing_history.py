"""A contrastive-style trainer that keeps every batch's features in a list and compares each new batch with all of
them: the step concatenates a history that grows by a batch a step, so each step is slower than the one before.

advisor run should report step-drift (the step time rises through the run, with the step's own work);
clean_train.py keeps nothing and gets none.
"""

import torch
import torch.nn.functional as F
from torch import nn


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1)
    history = []
    for _ in range(60):
        x = torch.randn(512, 64, generator=generator)
        features = F.normalize(model(x), dim=1)
        history.append(features.detach())
        bank = torch.cat(history)
        loss = -(features @ bank.T).logsumexp(1).mean()  # expect: step-drift
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"{len(history)} batches kept, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
