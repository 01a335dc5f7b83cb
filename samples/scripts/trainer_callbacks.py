"""A Trainer class with callbacks, in the style of the high-level training loops people use
(advisor run -- python trainer_callbacks.py --workers N).

The Trainer owns the loop: ``fit()`` iterates a multi-worker DataLoader of dict batches, runs a
``training_step`` and tells its callbacks after each step and each epoch; an evaluation pass
(``model.eval()`` under ``torch.no_grad()``) ends every epoch. The logging callback reads the loss back
with ``.item()`` after every step (a host sync on a GPU); the checkpoint callback saves every 100 steps.

What advisor must say: training, one step per optimizer step; the sync at the callback's line; a loader
finding, when there is one, at the ``DataLoader(...)`` call, with the dataset's ``__getitem__`` as the cost.
"""

import argparse
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, rows: int = 2048, width: int = 64, classes: int = 10):
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(rows, width, generator=generator)
        self.labels = torch.randint(0, classes, (rows,), generator=generator)

    def __len__(self):
        return len(self.features)

    def __getitem__(self, index):
        return {"features": self.features[index], "label": self.labels[index]}


class Callback:
    def on_step_end(self, trainer):
        pass

    def on_epoch_end(self, trainer):
        pass


class LossLogger(Callback):
    def __init__(self):
        self.history = []

    def on_step_end(self, trainer):
        self.history.append(trainer.last_loss.item())  # ITEM LINE


class Checkpointer(Callback):
    def __init__(self, every: int):
        self.every = every
        self.path = os.path.join(tempfile.gettempdir(), "trainer_callbacks_checkpoint.pt")

    def on_step_end(self, trainer):
        if trainer.global_step % self.every == 0 and trainer.global_step:
            torch.save(trainer.model.state_dict(), self.path)


class Trainer:
    def __init__(self, model, optimizer, loader, callbacks=()):
        self.model, self.optimizer, self.loader = model, optimizer, loader
        self.callbacks = list(callbacks)
        self.global_step = 0
        self.last_loss = None

    def training_step(self, batch):
        logits = self.model(batch["features"])
        loss = F.cross_entropy(logits, batch["label"])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    @torch.no_grad()
    def evaluate(self, batches: int = 8):
        self.model.eval()
        total = torch.zeros(())
        for index, batch in enumerate(self.loader):
            if index == batches:
                break
            total += F.cross_entropy(self.model(batch["features"]), batch["label"])
        self.model.train()
        return total / batches

    def fit(self, epochs: int):
        for _ in range(epochs):
            self.model.train()
            for batch in self.loader:
                self.last_loss = self.training_step(batch)
                self.global_step += 1
                for callback in self.callbacks:
                    callback.on_step_end(self)
            self.evaluate()
            for callback in self.callbacks:
                callback.on_epoch_end(self)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=True)
    loader = DataLoader(Records(), batch_size=64, shuffle=True, num_workers=args.workers,  # LOADER LINE
                        persistent_workers=args.workers > 0)
    Trainer(model, optimizer, loader, callbacks=[LossLogger(), Checkpointer(every=100)]).fit(args.epochs)


if __name__ == "__main__":
    main()
