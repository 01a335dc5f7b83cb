import copy

from torch import nn


class Momentum(nn.Module):
    def __init__(self, encoder: nn.Module, m: float = 0.999):
        super().__init__()
        self.encoder_q, self.encoder_k, self.m = encoder, copy.deepcopy(encoder), m

    def update(self):
        # the key encoder follows the query encoder
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):  # FINDING
            param_k.data.mul_(self.m).add_(param_q.data, alpha=1 - self.m)
