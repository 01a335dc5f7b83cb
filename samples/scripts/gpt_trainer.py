"""A GPT trainer in the style of the most-copied public one (advisor run -- python gpt_trainer.py).

Configured from the command line (``--key=value`` overrides the globals below, as its configurator
does); 40 micro-steps of gradient accumulation per optimizer step; an evaluation pass (``model.eval()``
under ``torch.no_grad()``) before the first step; batches sliced out of a NumPy memmap of tokens with a
host-made index tensor; a GradScaler that is disabled on the CPU; the loss read back with ``.item()`` to
log it every step. The token file is made on first use in ``data_dir``.

What advisor must say: one step per optimizer step, training; the host sync at the logging line; no sync
blamed on the memmap slicing (its index lives on the host in every run) and nothing at a library line.
"""

import math
import os
import sys
import tempfile
import time
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# --- configuration: defaults, then --key=value from the command line ------------------------------
data_dir = os.path.join(tempfile.gettempdir(), "advisor_gpt_trainer_data")
batch_size = 4
block_size = 32
gradient_accumulation_steps = 40
n_layer = 2
n_head = 2
n_embd = 64
vocab_size = 256
learning_rate = 6e-4
warmup_iters = 10
max_iters = 200
eval_interval = 100
eval_iters = 5
log_interval = 1
grad_clip = 1.0
device = "cpu"
dtype = "float32"

for argument in sys.argv[1:]:
    key, _, value = argument.removeprefix("--").partition("=")
    if key not in globals():
        raise ValueError(f"unknown config key: {key}")
    default = globals()[key]
    globals()[key] = type(default)(value) if not isinstance(default, str) else value


# --- the model -------------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


# --- data: a memmap of tokens, sliced at host-made random offsets ----------------------------------
def prepare_data() -> None:
    os.makedirs(data_dir, exist_ok=True)
    for split, tokens in (("train", 20_000), ("val", 4_000)):
        path = os.path.join(data_dir, f"{split}.bin")
        if not os.path.exists(path):
            rng = np.random.default_rng(0 if split == "train" else 1)
            rng.integers(0, vocab_size, tokens, dtype=np.uint16).tofile(path)


def get_batch(split):
    data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64)) for i in ix])  # MEMMAP LINE
    y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64)) for i in ix])
    return x.to(device), y.to(device)


@torch.no_grad()
def estimate_loss(model, ctx):
    out = {}
    model.eval()
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return learning_rate * 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio)))


def main():
    torch.manual_seed(1337)
    prepare_data()
    device_type = "cuda" if "cuda" in device else "cpu"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    ctx = nullcontext() if device_type == "cpu" else torch.autocast(device_type=device_type, dtype=ptdtype)
    model = GPT().to(device)
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))  # off on the CPU
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.1)
    X, Y = get_batch("train")
    t0 = time.time()
    for iter_num in range(max_iters + 1):
        for param_group in optimizer.param_groups:
            param_group["lr"] = get_lr(iter_num)
        if iter_num % eval_interval == 0:
            losses = estimate_loss(model, ctx)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        for _micro_step in range(gradient_accumulation_steps):
            with ctx:
                _, loss = model(X, Y)  # TRAIN FORWARD LINE
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        if iter_num % log_interval == 0:
            lossf = loss.item() * gradient_accumulation_steps  # ITEM LINE
            print(f"iter {iter_num}: loss {lossf:.4f}, time {(t1 - t0) * 1000:.2f}ms")
        t0 = t1


if __name__ == "__main__":
    main()
