"""A depthwise-separable CNN kept in bfloat16 and channels_last, as a model tuned for a bf16-capable CPU or a GPU
is: its weights cast with ``.bfloat16()``, its inputs made in bf16. Where bf16 is native that is the fast form;
on a CPU that emulates bf16 each convolution runs far below float32's roof (slow-precision, at the cast), and the
reorders oneDNN makes around convolutions in a dtype it emulates are not a layout the user chose (no
non-contiguous finding).

Its saved evidence is recorded with bf16 emulated (the ``record with`` line below).
"""
# record with: ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2

import torch
import torch.nn.functional as F
from torch import nn


def separable(channels_in: int, channels_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(channels_in, channels_in, 3, padding=1, groups=channels_in, bias=False),
                         nn.Conv2d(channels_in, channels_out, 1, bias=False), nn.BatchNorm2d(channels_out), nn.ReLU())


class SeparableNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.body = nn.Sequential(separable(32, 64), separable(64, 64), separable(64, 128))
        self.head = nn.Linear(128, classes)

    def forward(self, images):
        features = self.body(self.stem(images))
        return self.head(features.mean((2, 3)))


def get_model():
    torch.manual_seed(0)
    model = SeparableNet().to(memory_format=torch.channels_last)
    return model.bfloat16()  # expect where bf16 is emulated: slow-precision


def get_inputs():
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(8, 3, 64, 64, generator=generator).to(memory_format=torch.channels_last)
    return images.bfloat16()


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)


def loss_fn(logits, images):
    return F.cross_entropy(logits.float(), torch.zeros(logits.shape[0], dtype=torch.long))
