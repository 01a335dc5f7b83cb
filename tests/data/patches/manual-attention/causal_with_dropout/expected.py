import math

import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def forward(self, q, k, v, T):
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=~(self.bias[:, :, :T, :T] == 0), dropout_p=self.dropout.p if self.training else 0.0, scale=1.0 / math.sqrt(k.size(-1)))
        return self.proj(y)
