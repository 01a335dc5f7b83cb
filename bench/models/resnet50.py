"""A ResNet-50-sized CNN (bottleneck blocks 3-4-6-3, 25.6 M parameters) trained with SGD, for
bench/audit_scaling.py: how the audit's cost grows with a convolutional model of real size. Written here
(torchvision cannot be installed beside a CPU-only torch); images are 128 px to keep a step near a second on
two cores."""

import torch
from torch import nn
from torch.nn import functional as F


class Bottleneck(nn.Module):
    def __init__(self, inputs: int, width: int, stride: int):
        super().__init__()
        outputs = width * 4
        self.conv1 = nn.Conv2d(inputs, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, outputs, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Identity() if stride == 1 and inputs == outputs else nn.Sequential(
            nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + self.shortcut(x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        stages, inputs = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for index in range(blocks):
                stages.append(Bottleneck(inputs, width, stride if index == 0 else 1))
                inputs = width * 4
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(inputs, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def get_model():
    torch.manual_seed(0)
    return ResNet50()


LABELS = torch.randint(0, 1000, (4,), generator=torch.Generator().manual_seed(2))


def get_inputs():
    return torch.randn(4, 3, 128, 128, generator=torch.Generator().manual_seed(1))


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def loss_fn(logits, images):
    return F.cross_entropy(logits, LABELS)
