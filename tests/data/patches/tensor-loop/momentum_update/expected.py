import copy

from torch import nn
import torch


class Momentum(nn.Module):
    def __init__(self, encoder: nn.Module, m: float = 0.999):
        super().__init__()
        self.encoder_q, self.encoder_k, self.m = encoder, copy.deepcopy(encoder), m

    def update(self):
        # the key encoder follows the query encoder
        pairs = [(param_k.data, param_q.data) for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters())]
        targets = [target for target, _ in pairs]
        torch._foreach_mul_(targets, self.m)
        torch._foreach_add_(targets, [source for _, source in pairs], alpha=1 - self.m)
