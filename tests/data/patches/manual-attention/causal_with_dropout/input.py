import math

import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def forward(self, q, k, v, T):
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # scores
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)  # FINDING
        att = self.dropout(att)
        y = att @ v
        return self.proj(y)
