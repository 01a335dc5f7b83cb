"""A classifier trained from a loader of (features, label) pairs, the way most training code reads.

There is no get_inputs(): the step runs on the loader's real batches, the model gets ``batch[0]``
and ``loss_fn`` takes the labels from ``batch[1]`` (cross-entropy). Each sample is augmented in
Python in the main process (num_workers=0): loading costs several times the step
(dataloader-workers).
"""

import random

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class JitteredFeatures(Dataset):
    def __init__(self, rows: int = 512, width: int = 128, classes: int = 10):
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(rows, width, generator=generator)
        self.labels = torch.randint(0, classes, (rows,), generator=generator)
        self.random = random.Random(0)

    def __len__(self):
        return len(self.features)

    def __getitem__(self, index):  # expect: dataloader-workers
        jitter = torch.tensor([self.random.gauss(0.0, 0.05) for _ in range(self.features.shape[1])])
        return self.features[index] + jitter, self.labels[index]


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))


def get_dataloader():
    return DataLoader(JitteredFeatures(), batch_size=64, shuffle=True)


def get_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def loss_fn(output, batch):
    return F.cross_entropy(output, batch[1])  # the labels of the loader's own batch
