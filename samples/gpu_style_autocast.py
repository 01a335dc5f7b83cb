"""A small transformer language model written the way GPU code is: its forward runs under
``torch.autocast(device_type, dtype=torch.bfloat16)`` whatever the device. On a GPU or a CPU with native bf16
(AVX512-BF16, AMX) that is a gain; on a CPU without (AVX2: bf16 emulated) every matmul runs many times slower
than in float32, and nothing else in the trace says why (slow-precision, at the autocast line).

Its saved evidence is recorded with bf16 emulated (the ``record with`` line below), on the CPU the rule is for; on
a CPU with native bf16 the same audit finds nothing (a live test holds both).
"""
# record with: ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 256, width: int = 128, heads: int = 4, layers: int = 2, length: int = 32):
        super().__init__()
        self.embed, self.position = nn.Embedding(vocab, width), nn.Parameter(torch.zeros(length, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        with torch.autocast(device_type=tokens.device.type, dtype=torch.bfloat16):  # expect where bf16 is emulated: slow-precision
            x = self.embed(tokens) + self.position
            for block in self.blocks:
                x = block(x)
            return self.head(x).float()


def get_model():
    torch.manual_seed(0)
    return TinyLM()


def get_inputs():
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (8, 32), generator=generator)


def get_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)


def loss_fn(logits, tokens):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
