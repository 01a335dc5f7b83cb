"""A ResNet-style classifier (real-world style) trained with SGD + momentum, in fp32 NCHW.

BasicBlocks (conv-bn-relu-conv-bn + shortcut) in three stages, as torchvision's ResNets are
built; conv work dominates the step.
"""

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))  # expect: missing-amp
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.stages = nn.Sequential(
            BasicBlock(32, 32), BasicBlock(32, 64, stride=2), BasicBlock(64, 128, stride=2),
        )
        self.head = nn.Linear(128, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def get_model():
    torch.manual_seed(0)
    return ResNet()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(16, 3, 32, 32)


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)


def loss_fn(logits, images):
    return logits.logsumexp(-1).mean()
# expect anywhere: channels-last, optimizer-foreach
