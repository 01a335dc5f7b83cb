"""A training script written the way people write them (advisor run -- python train_loop.py).

argparse and a main(); a Dataset that augments each sample in Python, loaded in the main process;
a loop that logs ``loss.item()`` every step, saves a checkpoint every few steps and clears the
gradients with ``zero_grad(set_to_none=False)``.
"""

import argparse
import os
import random
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class NoisyPoints(Dataset):
    def __init__(self, rows: int = 4096, width: int = 64):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(rows, width, generator=generator)
        self.y = torch.randint(0, 10, (rows,), generator=generator)
        self.random = random.Random(0)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        noise = torch.tensor([self.random.gauss(0, 0.01) for _ in range(self.x.shape[1])])
        return self.x[index] + noise, self.y[index]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--save-every", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(NoisyPoints(), batch_size=args.batch_size, shuffle=True)
    checkpoint = os.path.join(tempfile.gettempdir(), "train_loop_checkpoint.pt")
    step = 0
    for epoch in range(args.epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)  # FORWARD LINE
            optimizer.zero_grad(set_to_none=False)  # ZERO GRAD LINE
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}")  # ITEM LINE
            if step % args.save_every == 0:
                torch.save(model.state_dict(), checkpoint)  # SAVE LINE
            step += 1


if __name__ == "__main__":
    main()
