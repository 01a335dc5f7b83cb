"""A classifier trained from a loader of dict batches, ``{"features": x, "label": y}``, as datasets
built for Trainer-style loops yield them.

The file defines ``get_inputs()`` (one example batch of features) and no ``inputs_from_batch``: the
model's input within each batch is the entry shaped like ``get_inputs()`` (``batch["features"]``), and
``loss_fn`` reads the labels from the loader's own batch. Each sample is augmented in Python in the main
process (num_workers=0): loading costs several times the step (dataloader-workers).
"""

import random

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class JitteredRecords(Dataset):
    def __init__(self, rows: int = 512, width: int = 128, classes: int = 10):
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(rows, width, generator=generator)
        self.labels = torch.randint(0, classes, (rows,), generator=generator)
        self.random = random.Random(0)

    def __len__(self):
        return len(self.features)

    def __getitem__(self, index):  # expect: dataloader-workers
        jitter = torch.tensor([self.random.gauss(0.0, 0.05) for _ in range(self.features.shape[1])])
        return {"features": self.features[index] + jitter, "label": self.labels[index]}


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(64, 128)


def get_dataloader():
    return DataLoader(JitteredRecords(), batch_size=64, shuffle=True)  # expect: dataloader-workers


def get_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def loss_fn(output, batch):
    return F.cross_entropy(output, batch["label"])  # a dict batch: the loader's own, never get_inputs()
