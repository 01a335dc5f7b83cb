"""A momentum encoder trained the way MoCo trains it: the key encoder follows the query encoder by an exponential
moving average, updated inside the forward one parameter tensor at a time (``k.data = k.data * m + q.data * (1 - m)``
over every pair): three small operators and a new tensor per parameter, 22 pairs here (tensor-loop, at the loop).

``torch._foreach_lerp_(keys, queries, 1 - m)`` does the same update over all tensors at once.
"""

import torch
import torch.nn.functional as F
from torch import nn


def encoder(width: int) -> nn.Sequential:
    layers = [nn.Linear(64, width), nn.LayerNorm(width), nn.ReLU()]
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 32))


class MomentumContrast(nn.Module):
    def __init__(self, width: int = 96, momentum: float = 0.999, temperature: float = 0.07):
        super().__init__()
        self.encoder_q, self.encoder_k = encoder(width), encoder(width)
        self.encoder_k.load_state_dict(self.encoder_q.state_dict())
        for parameter in self.encoder_k.parameters():
            parameter.requires_grad = False
        self.m, self.t = momentum, temperature

    @torch.no_grad()
    def _momentum_update(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):  # expect: tensor-loop
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    def forward(self, view_1, view_2):
        q = F.normalize(self.encoder_q(view_1), dim=1)
        self._momentum_update()
        with torch.no_grad():
            k = F.normalize(self.encoder_k(view_2), dim=1)
        return q @ k.T / self.t


def get_model():
    torch.manual_seed(0)
    return MomentumContrast()


def get_inputs():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(32, 64, generator=generator), torch.randn(32, 64, generator=generator)


def get_optimizer(model):
    return torch.optim.SGD(model.encoder_q.parameters(), lr=0.03, momentum=0.9, foreach=True)


def loss_fn(logits, batch):
    return F.cross_entropy(logits, torch.arange(logits.shape[0]))
