"""Training with a loader that decodes and augments every sample in the main process.

num_workers=0: each batch's preprocessing (an FFT-based blur per image) runs synchronously
between steps, so the model waits for data (dataloader-workers).
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class BlurredImages(Dataset):
    def __init__(self, count: int = 256, size: int = 64):
        generator = torch.Generator().manual_seed(0)
        self.images = torch.rand(count, 3, size, size, generator=generator)
        self.labels = torch.randint(0, 10, (count,), generator=generator)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):  # expect: dataloader-workers
        image = self.images[index]
        spectrum = torch.fft.rfft2(image)  # "decode + augment": real CPU work per sample
        for _ in range(4):
            spectrum = spectrum * torch.fft.rfft2(torch.rand_like(image)).abs().clamp(max=1)
        return torch.fft.irfft2(spectrum, s=image.shape[-2:]), self.labels[index]


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def get_dataloader():
    return DataLoader(BlurredImages(), batch_size=32, shuffle=True, num_workers=0)  # expect: dataloader-workers, dataloader-pin-memory


def get_inputs():
    images, _ = next(iter(get_dataloader()))
    return images


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)
# expect anywhere: channels-last
