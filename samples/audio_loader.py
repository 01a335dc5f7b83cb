"""Training a small audio classifier from a loader that augments each clip in Python.

Every clip gets a random crop, gain, and a noise mix computed per sample in the main process
(num_workers=0, pin_memory=False): loading dominates the step (dataloader-workers), and the
2 MB batches would cross to a GPU from pageable memory (dataloader-pin-memory).
"""

import math
import random

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class AugmentedClips(Dataset):
    def __init__(self, clips: int = 128, samples: int = 16000):
        generator = torch.Generator().manual_seed(0)
        self.audio = torch.randn(clips, samples + 4000, generator=generator)
        self.labels = torch.randint(0, 5, (clips,), generator=generator)
        self.samples = samples
        self.random = random.Random(0)

    def __len__(self):
        return len(self.audio)

    def __getitem__(self, index):  # expect: dataloader-workers
        start = self.random.randrange(0, 4000)
        clip = self.audio[index, start:start + self.samples].clone()
        gain = 10 ** (self.random.uniform(-6, 6) / 20)
        noise = torch.randn(self.samples) * 0.01
        envelope = torch.tensor([math.sin(math.pi * i / self.samples) for i in range(0, self.samples, 16)])
        clip = clip * gain + noise * envelope.repeat_interleave(16)
        return clip, self.labels[index]


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv1d(1, 8, 64, stride=32), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 5),
    )


def get_dataloader():
    return DataLoader(AugmentedClips(), batch_size=32, shuffle=True)  # expect: dataloader-workers, dataloader-pin-memory


def inputs_from_batch(batch):
    clips, _ = batch
    return clips.unsqueeze(1)  # (batch, 1 channel, samples) for the Conv1d


def get_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)
