"""GPT-2 attention in the "eager" form of HF transformers (manual-attention), inference.

Written as transformers writes its eager attention: a generic function of (module, query, key,
value), scores divided by a 0-d tensor, the causal mask applied with
``torch.where(bool_buffer, scores, finfo.min)``, softmax, a cast back with ``.type(value.dtype)``,
an ``nn.Dropout`` module, then ``@ value``. The (batch, heads, T, T) scores are stored and read
several times; ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` never stores them.
"""

import torch
from torch import nn


def eager_attention_forward(module, query, key, value):
    attn_weights = torch.matmul(query, key.transpose(-1, -2))
    attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype,
                                              device=attn_weights.device)
    query_length, key_length = query.size(-2), key.size(-2)
    causal_mask = module.bias[:, :, key_length - query_length:key_length, :key_length]
    mask_value = torch.full([], torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype,
                            device=attn_weights.device)
    attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)  # SOFTMAX LINE; expect: manual-attention
    attn_weights = attn_weights.type(value.dtype)
    attn_weights = module.attn_dropout(attn_weights)
    return torch.matmul(attn_weights, value)


class GPT2Attention(nn.Module):
    def __init__(self, width: int = 128, heads: int = 4, positions: int = 256):
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.attn_dropout = nn.Dropout(0.1)
        self.heads, self.head_dim = heads, width // heads
        causal = torch.tril(torch.ones((positions, positions), dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, positions, positions), persistent=False)

    def forward(self, hidden_states):
        shape = (*hidden_states.shape[:-1], self.heads, self.head_dim)
        query, key, value = self.c_attn(hidden_states).split(self.heads * self.head_dim, dim=2)
        query, key, value = (t.view(shape).transpose(1, 2) for t in (query, key, value))
        attn_output = eager_attention_forward(self, query, key, value)
        attn_output = attn_output.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1).contiguous()
        return self.c_proj(attn_output)


class Block(nn.Module):
    def __init__(self, width: int = 128):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = GPT2Attention(width)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block()).eval()


def get_inputs():
    return torch.randn(4, 256, 128, generator=torch.Generator().manual_seed(1))
