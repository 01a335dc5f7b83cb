"""A nanoGPT-style decoder (real-world style) trained with AdamW, attention through SDPA.

Written the way popular GPT implementations are: fused qkv projection, heads split with
view/transpose, F.scaled_dot_product_attention(is_causal=True), a 4x GELU MLP, tied embeddings.
"""

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 512, width: int = 128, heads: int = 4, layers: int = 2, block_size: int = 128):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block_size, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying

    def forward(self, idx):
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def get_model():
    torch.manual_seed(0)
    return GPT()


def get_inputs():
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 512, (8, 128), generator=generator)


def get_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)


def loss_fn(logits, idx):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1))
# expect anywhere: missing-amp, optimizer-foreach
